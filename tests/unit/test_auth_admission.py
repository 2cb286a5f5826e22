"""A HELLO's credential to an identity: tokens, ACL-listed certificates, and the cookie no longer enough.

Real keys and real files (the ACL and revocations re-read through
``WatchedFile``), so a change of either applies from the next HELLO.
"""

from __future__ import annotations

import os

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from aqueduct.auth import (
    Admission,
    Denied,
    Identity,
    KeyRing,
    Method,
    Refusal,
    decode_token,
    issue_token,
    parse_acl,
    parse_revocations,
)
from aqueduct.auth.watched import WatchedFile

NOW = 1_800_000_000
KEY = Ed25519PrivateKey.generate()
RING = KeyRing.of([KEY.public_key()])
TOKEN = issue_token(KEY, subject="orders", streams=("orders-*",), now=NOW, lifetime=3600).encode()
BILLING = "CN=billing-1,O=Acme"


def reason(result: Identity | Denied) -> Refusal:
    assert isinstance(result, Denied), result
    return result.reason


def files(tmp_path, acl: str, revoked: str = "") -> tuple[WatchedFile, WatchedFile]:
    (tmp_path / "acl").write_text(acl)
    (tmp_path / "revoked").write_text(revoked)
    return WatchedFile(tmp_path / "acl", parse_acl), WatchedFile(tmp_path / "revoked", parse_revocations)


def rewrite(path, text: str) -> None:
    (path.parent / "new").write_text(text)
    os.replace(path.parent / "new", path)


def test_without_keys_or_acl_the_cookie_still_admits():
    assert not Admission().required


def test_a_token_establishes_its_identity_and_the_cookie_alone_is_refused():
    admission = Admission(keys=RING)
    identity = admission.admit(TOKEN, None, NOW)
    assert isinstance(identity, Identity) and (identity.subject, identity.method) == ("orders", Method.TOKEN)
    assert reason(admission.admit(b"the shared cookie", None, NOW)) is Refusal.CREDENTIAL_REQUIRED
    assert str(admission.admit(b"", None, NOW)) == (
        "credential_required: this bridge admits producers by a token, not by the cookie"
    )
    assert reason(admission.admit(TOKEN, None, NOW + 7200)) is Refusal.EXPIRED


def test_a_token_on_a_bridge_without_a_token_key_is_refused(tmp_path):
    acl, _ = files(tmp_path, f'allow "{BILLING}" programs=* streams=*\n')
    assert reason(Admission(acl=acl.current).admit(TOKEN, BILLING, NOW)) is Refusal.UNKNOWN_KEY


def test_a_certificate_maps_through_the_acl_in_force(tmp_path):
    acl, revoked = files(tmp_path, f'allow "{BILLING}" programs=billing/* streams=billing-*\n')
    admission = Admission(keys=RING, acl=acl.current, revoked=revoked.current)
    identity = admission.admit(b"", BILLING, NOW)
    assert identity.method is Method.CERTIFICATE and identity.check_notify(1, "billing-eu") is None
    assert reason(admission.admit(b"", "CN=other", NOW)) is Refusal.NO_ACL_ENTRY
    rewrite(acl.path, 'allow "CN=other" programs=* streams=*\n')
    assert reason(admission.admit(b"", BILLING, NOW)) is Refusal.NO_ACL_ENTRY
    assert admission.admit(b"", "CN=other", NOW).method is Method.CERTIFICATE


def test_the_revocation_file_in_force_shuts_out_tokens_and_certificates(tmp_path):
    acl, revoked = files(tmp_path, f'allow "{BILLING}" programs=* streams=*\n')
    admission = Admission(keys=RING, acl=acl.current, revoked=revoked.current)
    assert isinstance(admission.admit(TOKEN, None, NOW), Identity)
    rewrite(revoked.path, f'token {decode_token(TOKEN).token_id}\nsubject "{BILLING}"\n')
    assert reason(admission.admit(TOKEN, None, NOW)) is Refusal.REVOKED
    denied = admission.admit(b"", BILLING, NOW)
    assert str(denied) == f"revoked: certificate subject {BILLING!r}: subject revoked"
