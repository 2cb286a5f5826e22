"""Signed producer tokens: what a bridge admits, and every way it refuses, each with its own reason.

Real Ed25519 keys throughout; the clock is an argument, so expiry and
skew are checked to the second without waiting.
"""

from __future__ import annotations

import base64
import json
import string

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aqueduct.auth import (
    CLOCK_SKEW,
    IdRange,
    KeyRing,
    Method,
    Refusal,
    Revocations,
    TokenRefused,
    decode_token,
    issue_token,
    key_id,
    looks_like_token,
    verify_token,
)
from aqueduct.auth.keys import load_private_key, private_key_pem, public_key_pem
from aqueduct.auth.tokens import MAX_TOKEN_LENGTH, _signed

NOW = 1_800_000_000
DAY = 86_400
KEY = Ed25519PrivateKey.generate()
OTHER = Ed25519PrivateKey.generate()
RING = KeyRing.of([KEY.public_key()])
FUZZ = settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow], deadline=None)


def token(key: Ed25519PrivateKey = KEY, **overrides) -> str:
    return issue_token(key, **{"subject": "orders", "streams": ("orders-*",), "now": NOW, "lifetime": DAY, **overrides})


def refusal(text: str | bytes, keys: KeyRing = RING, now: float = NOW, **kwargs) -> Refusal:
    with pytest.raises(TokenRefused) as caught:
        verify_token(text, keys, now, **kwargs)
    return caught.value.reason


def test_an_issued_token_verifies_with_the_public_key_alone_and_carries_its_permissions():
    claims = verify_token(token(stream_ids=(IdRange(0, 99),)), RING, NOW + 10)
    assert (claims.subject, claims.streams, claims.programs) == ("orders", ("orders-*",), ("orders/*",))
    assert (claims.issued_at, claims.expires_at, claims.key_id) == (NOW, NOW + DAY, key_id(KEY.public_key()))
    identity = claims.identity()
    assert (identity.subject, identity.method, identity.token_id) == ("orders", Method.TOKEN, claims.token_id)
    assert identity.check_hello("orders", "p0") is None
    assert identity.check_notify(5, "orders-eu") is None
    assert identity.check_notify(100, "orders-eu").reason is Refusal.STREAM_ID_NOT_ALLOWED


def test_the_token_is_one_printable_line_with_a_canonical_json_payload():
    text = token()
    assert text.startswith("aqt1.") and looks_like_token(text) and looks_like_token(text.encode())
    assert set(text) <= set(string.ascii_letters + string.digits + "-_.")
    payload = text.split(".")[1]
    raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    doc = json.loads(raw)
    assert raw == json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    assert len(text) < 400  # a few patterns: far inside HELLO's 64 KiB cookie field
    assert not looks_like_token(b"a shared cookie")


def test_each_token_gets_its_own_id():
    assert decode_token(token()).token_id != decode_token(token()).token_id


def test_expiry_allows_the_documented_clock_skew_and_no_more():
    text = token(lifetime=3600)
    verify_token(text, RING, NOW + 3600 + CLOCK_SKEW - 1)
    assert refusal(text, now=NOW + 3600 + CLOCK_SKEW) is Refusal.EXPIRED
    assert refusal(text, now=NOW + 3600, skew=0) is Refusal.EXPIRED


def test_a_token_from_the_future_is_refused_beyond_the_skew():
    text = token()
    verify_token(text, RING, NOW - CLOCK_SKEW)
    assert refusal(text, now=NOW - CLOCK_SKEW - 1) is Refusal.NOT_YET_VALID


def test_revoked_by_token_id_or_by_subject():
    text = token()
    jti = decode_token(text).token_id
    assert refusal(text, revoked=Revocations(token_ids=frozenset({jti}))) is Refusal.REVOKED
    assert refusal(text, revoked=Revocations(subjects=frozenset({"orders"}))) is Refusal.REVOKED
    verify_token(text, RING, NOW, Revocations(frozenset({"another"}), frozenset({"billing"})))


def test_revocation_is_told_even_for_an_expired_token():
    text = token(lifetime=1)
    jti = decode_token(text).token_id
    assert refusal(text, now=NOW + DAY, revoked=Revocations(token_ids=frozenset({jti}))) is Refusal.REVOKED


def test_a_token_signed_by_another_key_is_refused_as_unknown_key():
    assert refusal(token(key=OTHER)) is Refusal.UNKNOWN_KEY


def test_a_token_naming_our_key_but_signed_by_another_is_a_bad_signature():
    forged_claims = decode_token(token()).as_json() | {"streams": ["*"], "programs": ["*"]}
    payload = json.dumps(forged_claims, sort_keys=True, separators=(",", ":")).encode()
    assert refusal(_signed(payload, OTHER)) is Refusal.BAD_SIGNATURE


def test_a_widened_payload_under_the_original_signature_is_a_bad_signature():
    head, payload, signature = token().split(".")
    doc = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    doc["streams"] = ["*"]
    widened = base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()
    assert refusal(f"{head}.{widened}.{signature}") is Refusal.BAD_SIGNATURE


def test_keys_rotate_a_ring_of_old_and_new_verifies_both():
    ring = KeyRing.from_pem(public_key_pem(KEY.public_key()) + public_key_pem(OTHER.public_key()))
    assert set(ring) == {key_id(KEY.public_key()), key_id(OTHER.public_key())}
    verify_token(token(), ring, NOW)
    verify_token(token(key=OTHER), ring, NOW)
    assert set(RING.merged(KeyRing.of([OTHER.public_key()]))) == set(ring)


def test_key_files_round_trip_and_refuse_what_is_not_ed25519():
    assert key_id(load_private_key(private_key_pem(KEY)).public_key()) == key_id(KEY.public_key())
    with pytest.raises(ValueError, match="no PEM public key"):
        KeyRing.from_pem(b"nothing here")
    with pytest.raises(ValueError, match="unencrypted PEM private key"):
        load_private_key(public_key_pem(KEY.public_key()))


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", Refusal.MALFORMED),
        ("a shared cookie", Refusal.MALFORMED),
        ("aqt1.", Refusal.MALFORMED),
        ("aqt1..", Refusal.MALFORMED),
        ("aqt1.e30.AAAA", Refusal.MALFORMED),  # {} and a signature of 3 bytes
        ("aqt2.e30.AAAA", Refusal.UNKNOWN_VERSION),
        ("aqt1.e3=0." + "A" * 86, Refusal.MALFORMED),
        ("aqt1.e30." + "A" * 86, Refusal.MALFORMED),  # {}: no claims
        ("aqt1." + "A" * (MAX_TOKEN_LENGTH), Refusal.MALFORMED),
        (b"aqt1.\xff.\xff", Refusal.MALFORMED),
    ],
)
def test_malformed_tokens_are_refused_as_such(text, reason):
    assert refusal(text) is reason


@pytest.mark.parametrize(
    "change",
    [
        {"iat": 1.5},
        {"iat": True},
        {"exp": -1},
        {"sub": ""},
        {"sub": "line\nbreak"},
        {"streams": []},
        {"streams": ["a,b"]},
        {"programs": "orders/*"},
        {"ids": [[5, 1]]},
        {"ids": [[0, 2**64]]},
        {"ids": []},
        {"extra": 1},
        {"kid": None},
    ],
)
def test_well_signed_claims_of_the_wrong_shape_are_malformed(change):
    doc = decode_token(token()).as_json() | change
    assert refusal(_signed(json.dumps(doc).encode(), KEY)) is Refusal.MALFORMED


def test_issuing_refuses_claims_a_bridge_would_refuse():
    with pytest.raises(ValueError, match="lifetime"):
        token(lifetime=0)
    with pytest.raises(ValueError, match="would be refused"):
        token(streams=("a,b",))
    with pytest.raises(ValueError, match="would be refused"):
        token(streams=tuple(f"stream-{i}-*" for i in range(1000)))


def test_the_refusal_text_never_holds_the_token():
    text = token(lifetime=1)
    with pytest.raises(TokenRefused) as caught:
        verify_token(text, RING, NOW + DAY)
    assert str(caught.value).startswith("expired: ") and text.split(".")[2] not in str(caught.value)


# ------------------------------------------------------------ fuzzing: only TokenRefused


def only_refused(text: str | bytes) -> None:
    try:
        verify_token(text, RING, NOW)
    except TokenRefused as exc:
        assert isinstance(exc.reason, Refusal)
    try:
        decode_token(text)
    except TokenRefused:
        pass


@FUZZ
@given(st.one_of(st.text(), st.binary(), st.text(alphabet="aqt1._-=AZaz09e3J" + string.printable)))
def test_fuzzed_tokens_raise_nothing_but_token_refused(text):
    only_refused(text)
    only_refused("aqt1." + (text if isinstance(text, str) else text.hex()))


VALID = token(stream_ids=(IdRange(1, 9),))


@FUZZ
@given(st.integers(0, len(VALID) - 1), st.characters(codec="ascii"), st.integers(0, 3))
def test_a_mutated_token_is_refused_never_admitted(at, char, how):
    mutated = {
        0: VALID[:at] + char + VALID[at + 1 :],
        1: VALID[:at] + char + VALID[at:],
        2: VALID[:at] + VALID[at + 1 :],
        3: VALID[:at],
    }[how]
    if mutated == VALID:
        return
    try:
        claims = verify_token(mutated, RING, NOW)
    except TokenRefused:
        return
    # base64 ignores the last character's spare bits: the same bytes, the same claims.
    assert claims == decode_token(VALID)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@FUZZ
@given(st.dictionaries(st.sampled_from(["sub", "programs", "streams", "ids", "iat", "exp", "jti", "kid", "x"]), JSON))
def test_any_well_signed_json_is_claims_or_malformed(doc):
    signed = _signed(json.dumps(doc).encode(), KEY)
    try:
        verify_token(signed, RING, NOW)
    except TokenRefused as exc:
        assert exc.reason in (Refusal.MALFORMED, Refusal.UNKNOWN_KEY, Refusal.EXPIRED, Refusal.NOT_YET_VALID)


def test_deeply_nested_json_is_malformed_not_a_recursion_error():
    deep = _signed(("[" * 2500 + "]" * 2500).encode(), KEY)
    assert len(deep) <= MAX_TOKEN_LENGTH
    assert refusal(deep) is Refusal.MALFORMED


NAMES = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters=","), min_size=1, max_size=12).filter(str.isprintable)
RANGES = st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)).map(lambda p: IdRange(min(p), max(p)))


@FUZZ
@given(
    subject=NAMES,
    streams=st.lists(NAMES, min_size=1, max_size=4).map(tuple),
    programs=st.none() | st.lists(NAMES, min_size=1, max_size=4).map(tuple),
    stream_ids=st.none() | st.lists(RANGES, min_size=1, max_size=3).map(tuple),
    now=st.integers(0, 2**40),
    lifetime=st.integers(1, 2**30),
)
def test_any_issued_token_verifies_to_the_claims_it_was_issued_with(subject, streams, programs, stream_ids, now, lifetime):
    text = issue_token(KEY, subject=subject, streams=streams, programs=programs, stream_ids=stream_ids, now=now, lifetime=lifetime)
    claims = verify_token(text, RING, now)
    assert (claims.subject, claims.streams, claims.stream_ids) == (subject, streams, stream_ids)
    assert claims.programs == (programs or (f"{subject}/*",))
    assert claims.expires_at - claims.issued_at == lifetime
