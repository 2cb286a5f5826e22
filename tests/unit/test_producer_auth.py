"""The bridge's producer credentials from real files, and HELLO's door on both worker wires (issue 38).

Real keys, real token, ACL and revocation files; the worker sessions are
the sans-IO machines the listeners run, so the ERROR a refused producer
reads is checked byte for byte.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from aqueduct.auth import Identity, Method, Refusal, decode_token, issue_token
from aqueduct.auth.keys import public_key_pem
from aqueduct.bridge.ingest.producer_auth import ProducerAuth, ProducerAuthError
from aqueduct.bridge.ingest.refusals import LOG_INTERVAL, RefusalLog, refusal_kind
from aqueduct.connector.events import HelloAccepted, SessionEnded
from aqueduct.connector.frames import PROTOCOL_VERSION, Error, FrameSplitter, Hello, encode
from aqueduct.connector.wallaroo.frames import PROTOCOL_VERSION as V3_VERSION
from aqueduct.connector.wallaroo.frames import WallarooError, WallarooFrameSplitter, WallarooHello
from aqueduct.connector.wallaroo.frames import encode as v3_encode
from aqueduct.connector.wallaroo.worker_session import WallarooSession
from aqueduct.connector.worker_session import WorkerConfig, WorkerSession

KEY = Ed25519PrivateKey.generate()


def token(subject: str = "orders", lifetime: int = 3600, key: Ed25519PrivateKey = KEY, **claims) -> bytes:
    claims.setdefault("streams", (f"{subject}-*",))
    return issue_token(key, subject=subject, now=int(time.time()), lifetime=lifetime, **claims).encode()


def rewrite(path: Path, text: str | bytes) -> None:
    new = path.with_suffix(".new")
    new.write_bytes(text.encode() if isinstance(text, str) else text)
    os.replace(new, path)


@pytest.fixture(scope="module")
def pub_key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "token.pub"
    path.write_bytes(public_key_pem(KEY.public_key()))
    return path


@pytest.fixture
def pub(tmp_path: Path) -> Path:
    path = tmp_path / "token.pub"
    path.write_bytes(public_key_pem(KEY.public_key()))
    return path


def test_no_option_means_the_cookie_admits(tmp_path: Path) -> None:
    assert ProducerAuth.from_options(None, None, None) is None


def test_a_token_under_the_key_file_in_force_admits_and_a_rotated_key_applies_without_restart(
    tmp_path: Path, pub: Path
) -> None:
    auth = ProducerAuth.from_options(pub, None, None)
    assert auth is not None
    admitted = auth.check(token(), None)
    assert isinstance(admitted, Identity) and (admitted.subject, admitted.method) == ("orders", Method.TOKEN)
    new_key = Ed25519PrivateKey.generate()
    assert str(auth.check(token(key=new_key), None)).startswith("unknown_key: ")
    rewrite(pub, public_key_pem(KEY.public_key()) + public_key_pem(new_key.public_key()))  # rotation: both
    assert isinstance(auth.check(token(key=new_key), None), Identity)
    assert isinstance(auth.check(token(), None), Identity)


def test_a_revocation_written_while_serving_refuses_the_next_hello(tmp_path: Path, pub: Path) -> None:
    revoked = tmp_path / "revoked"
    revoked.write_text("# nothing yet\n")
    auth = ProducerAuth(pub, None, revoked)
    tok = token()
    assert isinstance(auth.check(tok, None), Identity)
    token_id = decode_token(tok).token_id
    rewrite(revoked, f"token {token_id}\n")
    assert str(auth.check(tok, None)) == f"revoked: token {token_id} of 'orders': token id revoked"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"token_key": "missing.pub"}, "--token-key: cannot read {d}/missing.pub: No such file or directory"),
        ({"token_key": ("bad.pub", "not a key\n")}, "--token-key: {d}/bad.pub:1: no PEM public key (-----BEGIN PUBLIC KEY-----) found"),
        ({"acl": ("acl", "allow\n")}, "--acl: {d}/acl:1: "),
        ({"token_key": "token.pub", "token_revoked": ("revoked", "tokn x\n")}, "--token-revoked: {d}/revoked:1: expected `token ID`"),
        ({"token_revoked": ("revoked", "")}, "--token-revoked needs --token-key or --acl"),
    ],
    ids=["missing-key", "not-a-key", "bad-acl", "bad-revocations", "revocations-alone"],
)  # fmt: skip
def test_a_file_the_bridge_cannot_start_with_is_one_line_naming_it(
    tmp_path: Path, pub: Path, files: dict, message: str
) -> None:
    paths = {}
    for option, spec in files.items():
        name, text = spec if isinstance(spec, tuple) else (spec, None)
        if text is not None:
            (tmp_path / name).write_text(text)
        paths[option] = tmp_path / name
    with pytest.raises(ProducerAuthError) as raised:
        ProducerAuth.from_options(paths.get("token_key"), paths.get("acl"), paths.get("token_revoked"))
    assert str(raised.value).startswith(message.format(d=tmp_path)) and "\n" not in str(raised.value)


def _hello_error(session: WorkerSession | WallarooSession, secret: bytes, program: str) -> str | None:
    if isinstance(session, WallarooSession):
        events = session.receive_data(v3_encode(WallarooHello(V3_VERSION, secret, program, "p0")))
        frames = WallarooFrameSplitter().feed(session.data_to_send())
        errors = [f.reason for f in frames if isinstance(f, WallarooError)]
    else:
        events = session.receive_data(encode(Hello(PROTOCOL_VERSION, secret, program, "p0")))
        errors = [f.reason for f in FrameSplitter().feed(session.data_to_send()) if isinstance(f, Error)]
    if any(isinstance(e, HelloAccepted) for e in events):
        return None
    assert errors and events == [SessionEnded(errors[0], "local")]
    return errors[0]


@pytest.mark.parametrize("wire", [WorkerSession, WallarooSession], ids=["connector", "wallaroo-v3"])
def test_hello_is_admitted_by_its_credential_and_the_program_it_may_claim(pub: Path, wire: type) -> None:
    auth = ProducerAuth(pub)
    config = WorkerConfig(cookie=b"shared", credentials=auth.check)
    ok = wire(config, lambda p, i: ())
    assert _hello_error(ok, token(), "orders") is None
    assert ok.identity is not None and ok.identity.subject == "orders"
    assert _hello_error(wire(config, lambda p, i: ()), b"shared", "orders") == (
        "credential_required: this bridge admits producers by a token, not by the cookie"
    )
    billing = token()
    assert _hello_error(wire(config, lambda p, i: ()), billing, "billing") == (
        f"program_not_allowed: program 'billing/p0' is not in programs orders/* of token "
        f"{decode_token(billing).token_id} (subject 'orders')"
    )


def test_the_cookie_alone_still_admits_as_anonymous_without_credentials() -> None:
    session = WorkerSession(WorkerConfig(cookie=b"shared"))
    assert _hello_error(session, b"shared", "anything") is None
    assert session.identity is not None and session.identity.method is Method.ANONYMOUS


def test_refusal_kinds_are_the_reasons_first_words() -> None:
    assert refusal_kind(SessionEnded("expired: token abc expired at ...", "local")) == "expired"
    assert refusal_kind(SessionEnded("stream_not_allowed: stream 'billing-1' ...", "local")) == "stream_not_allowed"
    assert refusal_kind(SessionEnded("stream 7 belongs to identity 'billing', not 'x'", "local")) == "stream_owner"
    assert refusal_kind(SessionEnded("bad cookie", "local")) == "bad_cookie"
    assert refusal_kind(SessionEnded("expired: whatever", "peer")) == "connector_error"
    assert refusal_kind(SessionEnded("credit exceeded", "local")) == "protocol_violation"


def test_refusals_are_all_counted_and_logged_once_a_minute_per_host_and_kind(caplog) -> None:
    now = [1000.0]
    counts: Counter[str] = Counter()
    log = RefusalLog(counts, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        for port in range(100):  # a flood from one host, each from a new port
            log.refused("expired", f"tcp 10.0.0.7:{port}", "refused %s", "x")
        log.refused("expired", "tcp 10.0.0.8:1", "refused %s", "y")  # another host: its own line
        log.refused("bad_signature", "tcp 10.0.0.7:5", "refused %s", "z")  # another kind: its own line
        now[0] += LOG_INTERVAL
        log.refused("expired", "tcp 10.0.0.7:9", "refused %s", "x")
    assert counts == Counter({"expired": 102, "bad_signature": 1})
    assert [r.getMessage() for r in caplog.records] == [
        "refused x", "refused y", "refused z",
        "refused x (and 99 more expired refusal(s) from there in the last 60 s)",
    ]  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(tail=st.binary(max_size=400), cut=st.integers(0, 400))
def test_fuzzed_tokens_end_the_session_with_a_refusal_never_a_crash(pub_key_file: Path, tail: bytes, cut: int) -> None:
    """Whatever follows ``aqt1.`` (a mangled real token, or any bytes), HELLO gets one refusal's ERROR."""
    real = token()
    secret = (real[:cut] + tail)[: 60000] if tail and tail[0] % 2 else b"aqt1." + tail
    session = WorkerSession(WorkerConfig(credentials=ProducerAuth(pub_key_file).check), lambda p, i: ())
    reason = _hello_error(session, secret, "orders")
    if reason is not None:
        assert reason.partition(":")[0] in {r.value for r in Refusal}, reason
