"""``aqueduct token`` as an operator runs it: the real console script, real key files, real tokens.

What each command writes or prints is checked with the library a bridge
verifies with (:func:`aqueduct.auth.verify_token`), so a token the command
prints is one a bridge admits.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aqueduct.auth import (
    IdRange,
    KeyRing,
    Refusal,
    TokenRefused,
    issue_token,
    load_private_key,
    verify_token,
)

TIMEOUT = 60


def aqueduct(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("aqueduct")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "aqueduct.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=TIMEOUT, input=stdin)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def one_line_error(done: subprocess.CompletedProcess[str], expected: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [expected]


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    key, pub = tmp_path / "token.key", tmp_path / "token.pub"
    ok(aqueduct("token", "keygen", "--key", str(key), "--pub", str(pub)))
    return key, pub


def ring(pub: Path) -> KeyRing:
    return KeyRing.from_pem(pub.read_bytes())


def test_keygen_writes_an_owner_only_private_key_and_names_its_key_id(tmp_path):
    key, pub = tmp_path / "k", tmp_path / "p"
    doc = json.loads(ok(aqueduct("token", "keygen", "--key", str(key), "--pub", str(pub), "--json")))
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert set(ring(pub)) == {doc["key_id"]} and doc["key"] == str(key)


def test_keygen_refuses_to_overwrite_without_force(keys):
    key, pub = keys
    before = key.read_bytes()
    one_line_error(
        aqueduct("token", "keygen", "--key", str(key), "--pub", str(pub)),
        f"aqueduct token keygen: refusing to overwrite {key} (use --force)",
    )
    assert key.read_bytes() == before
    key.chmod(0o644)
    ok(aqueduct("token", "keygen", "--key", str(key), "--pub", str(pub), "--force"))
    assert key.read_bytes() != before and stat.S_IMODE(key.stat().st_mode) == 0o600


def test_an_issued_token_verifies_with_the_public_key_and_says_what_it_allows(keys):
    key, pub = keys
    token = ok(aqueduct("token", "issue", "--key", str(key), "--subject", "orders", "--streams", "orders-*,audit", "--expires", "30d")).strip()
    claims = verify_token(token, ring(pub), time.time())
    assert (claims.subject, claims.streams, claims.programs) == ("orders", ("orders-*", "audit"), ("orders/*",))
    assert abs(claims.expires_at - claims.issued_at - 30 * 86400) == 0
    identity = claims.identity()
    assert identity.check_notify(3, "orders-eu") is None
    assert identity.check_notify(3, "billing-1").reason is Refusal.STREAM_NOT_ALLOWED


def test_issue_json_with_programs_and_stream_ids(keys):
    key, pub = keys
    doc = json.loads(ok(aqueduct(
        "token", "issue", "--key", str(key), "--subject", "edge-17", "--streams", "*",
        "--programs", "billing/*,audit/edge-17", "--stream-ids", "100-199,7", "--expires", "12h", "--json",
    )))  # fmt: skip
    claims = verify_token(doc["token"], ring(pub), time.time())
    assert claims.programs == ("billing/*", "audit/edge-17") and doc["programs"] == list(claims.programs)
    assert claims.stream_ids == (IdRange(100, 199), IdRange(7, 7)) and doc["ids"] == [[100, 199], [7, 7]]
    assert doc["exp"] - doc["iat"] == 12 * 3600 and doc["expires_at"].endswith("Z")
    assert doc["jti"] == claims.token_id and doc["kid"] == claims.key_id


@pytest.mark.parametrize("value", ["30", "0d", "1w", "-5m", "1.5h", "d", ""])
def test_a_bad_expiry_is_one_line_and_exit_2(keys, value):
    key, _ = keys
    one_line_error(
        aqueduct("token", "issue", "--key", str(key), "--subject", "s", "--streams", "a", f"--expires={value}"),
        f"aqueduct token issue: --expires: expected a duration like 1s, 10m, 12h or 30d, got {value!r}",
    )


@pytest.mark.parametrize(
    "option, value, error",
    [
        ("--streams", "a,,b", "--streams: expected comma-separated patterns, got 'a,,b'"),
        ("--stream-ids", "9-1", "--stream-ids: stream id range 9-1 is not 0 <= low <= high < 2**64"),
        ("--programs", "", "--programs: expected comma-separated patterns, got ''"),
    ],
)
def test_bad_permissions_are_one_line_and_exit_2(keys, option, value, error):
    key, _ = keys
    args = {"--streams": "a", option: value}
    flat = [x for pair in args.items() for x in pair]
    one_line_error(
        aqueduct("token", "issue", "--key", str(key), "--subject", "s", "--expires", "1h", *flat),
        f"aqueduct token issue: {error}",
    )


def test_issue_with_a_missing_or_wrong_key_file_is_one_line(keys, tmp_path):
    _, pub = keys
    one_line_error(
        aqueduct("token", "issue", "--key", str(tmp_path / "none"), "--subject", "s", "--streams", "a", "--expires", "1h"),
        f"aqueduct token issue: --key: cannot read {tmp_path / 'none'}: No such file or directory",
    )
    done = aqueduct("token", "issue", "--key", str(pub), "--subject", "s", "--streams", "a", "--expires", "1h")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert "not an unencrypted PEM private key" in done.stderr


def test_inspect_shows_the_claims_without_the_key_and_verifies_with_it(keys, tmp_path):
    key, pub = keys
    token = ok(aqueduct("token", "issue", "--key", str(key), "--subject", "orders", "--streams", "orders-*", "--expires", "1h")).strip()
    shown = ok(aqueduct("token", "inspect", token))
    assert "subject   orders" in shown and "verified  not checked" in shown
    doc = json.loads(ok(aqueduct("token", "inspect", "-", "--pub", str(pub), "--json", stdin=token + "\n")))
    assert doc["verified"] is True and doc["sub"] == "orders"
    revoked = tmp_path / "revoked"
    revoked.write_text(f"# leaked\ntoken {doc['jti']}\n")
    done = aqueduct("token", "inspect", token, "--pub", str(pub), "--revoked", str(revoked))
    assert done.returncode == 1 and "verified  REFUSED, revoked: " in done.stdout


def test_inspect_refuses_expired_and_foreign_tokens(keys, tmp_path):
    key, pub = keys
    expired = issue_token(load_private_key(key.read_bytes()), subject="s", streams=("a",), now=int(time.time()) - 7200, lifetime=3600)
    doc = json.loads(aqueduct("token", "inspect", expired, "--pub", str(pub), "--json").stdout)
    assert (doc["verified"], doc["refusal"]) == (False, "expired")
    other_key, other_pub = tmp_path / "other.key", tmp_path / "other.pub"
    ok(aqueduct("token", "keygen", "--key", str(other_key), "--pub", str(other_pub)))
    foreign = ok(aqueduct("token", "issue", "--key", str(other_key), "--subject", "s", "--streams", "a", "--expires", "1h")).strip()
    done = aqueduct("token", "inspect", foreign, "--pub", str(pub), "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["refusal"] == "unknown_key"
    with pytest.raises(TokenRefused):
        verify_token(foreign, ring(pub), time.time())
    # both public keys (a rotation): the foreign one verifies
    ok(aqueduct("token", "inspect", foreign, "--pub", str(pub), "--pub", str(other_pub)))


def test_inspect_of_something_else_is_one_line(tmp_path):
    one_line_error(
        aqueduct("token", "inspect", "a shared cookie"),
        "aqueduct token inspect: not a token: malformed: not aqt1.<payload>.<signature>",
    )
    one_line_error(
        aqueduct("token", "inspect", "-", "--revoked", str(tmp_path / "revoked"), stdin=""),
        "aqueduct token inspect: --revoked needs --pub: only a verified token is checked for revocation",
    )


@pytest.mark.parametrize("command", [[], ["keygen"], ["issue"], ["inspect"]])
def test_every_token_command_has_help(command):
    out = ok(aqueduct("token", *command, "--help"))
    assert out.startswith(f"usage: aqueduct token {' '.join(command)}".rstrip())
