"""A token verified once skips its signature check on reconnect; expiry, revocation and the key ring still apply."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from aqueduct.auth import KeyRing, Refusal, TokenRefused, decode_token, issue_token, verify_token
from aqueduct.auth.revocation import Revocations
from aqueduct.auth.verified import VerifiedTokens

NOW = 1_800_000_000
KEY = Ed25519PrivateKey.generate()
RING = KeyRing.of([KEY.public_key()])
TOKEN = issue_token(KEY, subject="orders", streams=("orders-*",), now=NOW, lifetime=3600).encode()


def refusal(**kwargs) -> Refusal:
    with pytest.raises(TokenRefused) as raised:
        verify_token(TOKEN, **kwargs)
    return raised.value.reason


def test_a_reconnect_skips_the_signature_but_not_expiry_or_revocation() -> None:
    verified = VerifiedTokens()
    assert verify_token(TOKEN, RING, NOW, verified=verified).subject == "orders"
    assert verify_token(TOKEN, RING, NOW + 10, verified=verified).subject == "orders"
    assert verified.hits == 1
    assert refusal(keys=RING, now=NOW + 7200, verified=verified) is Refusal.EXPIRED
    revoked = Revocations(token_ids=frozenset({decode_token(TOKEN).token_id}))
    assert refusal(keys=RING, now=NOW, revoked=revoked, verified=verified) is Refusal.REVOKED
    assert verified.hits == 3


def test_another_key_ring_checks_the_signature_again() -> None:
    verified = VerifiedTokens()
    verify_token(TOKEN, RING, NOW, verified=verified)
    other = KeyRing.of([Ed25519PrivateKey.generate().public_key()])  # the key file changed: ours is gone
    assert refusal(keys=other, now=NOW, verified=verified) is Refusal.UNKNOWN_KEY
    assert verified.hits == 0


def test_a_refused_token_is_never_remembered_and_the_cache_is_bounded() -> None:
    verified = VerifiedTokens(limit=2)
    tampered = TOKEN[:-3] + (b"AAA" if not TOKEN.endswith(b"AAA") else b"BBB")
    for _ in range(2):
        with pytest.raises(TokenRefused):
            verify_token(tampered, RING, NOW, verified=verified)
    assert len(verified) == 0
    for i in range(3):
        other = issue_token(KEY, subject=f"s{i}", streams=("*",), now=NOW, lifetime=60).encode()
        verify_token(other, RING, NOW, verified=verified)
    assert len(verified) == 2
