"""``aqueduct token``: the operator's key pair and the signed producer tokens it issues.

- ``keygen --key KEY --pub PUB``: a new Ed25519 key pair (the private key
  mode 0600; neither file overwritten without ``--force``);
- ``issue --key KEY --subject NAME --streams PATTERNS --expires 30d``: prints
  a token (``--json``: the token and its claims);
- ``inspect TOKEN``: shows what a token says; with ``--pub`` (and
  ``--revoked``) also whether a bridge holding that key would admit it now.

The token format and its checks are :mod:`aqueduct.auth.tokens`; this
module reads and writes the files and the clock.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from aqueduct.auth.keys import KeyRing, key_id, load_private_key, private_key_pem, public_key_pem
from aqueduct.auth.permissions import parse_id_ranges, parse_patterns
from aqueduct.auth.refusals import TokenRefused
from aqueduct.auth.revocation import NO_REVOCATIONS, parse_revocations
from aqueduct.auth.textfile import AuthFileError
from aqueduct.auth.tokens import TokenClaims, decode_token, issue_token, verify_token
from aqueduct.console import UsageError

__all__ = ["add_token_parser", "parse_duration", "token_command"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"([1-9][0-9]{0,9})([smhd])")


def parse_duration(text: str) -> int:
    """``"30d"`` -> seconds; ValueError unless a positive whole number and one of s, m, h, d."""
    found = _DURATION.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"expected a duration like 1s, 10m, 12h or 30d, got {text!r}")
    return int(found.group(1)) * _UNITS[found.group(2)]


def add_token_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``token`` command and its three subcommands, on ``aqueduct``'s subparsers."""
    token = sub.add_parser(
        "token",
        help="make the key pair and the signed producer tokens a bridge verifies",
        description="Signed producer tokens: issued offline with your private key, verified by "
        "any bridge with the public key alone (docs/deployment.md, Producer tokens).",
    )
    actions = token.add_subparsers(dest="token_command", required=True)

    keygen = actions.add_parser(
        "keygen",
        help="write a new Ed25519 key pair",
        description="Write a new Ed25519 key pair: KEY (private, mode 0600, keep it off the "
        "bridges) signs tokens, PUB (public) goes to every bridge (serve --token-key).",
    )
    keygen.add_argument("--key", required=True, metavar="KEY", help="the private key file to write")
    keygen.add_argument("--pub", required=True, metavar="PUB", help="the public key file to write")
    keygen.add_argument("--force", action="store_true", help="overwrite existing files")
    keygen.add_argument("--json", action="store_true", help="print the key id and paths as JSON")

    issue = actions.add_parser(
        "issue",
        help="print a signed token for a producer",
        description="Print a token that lets SUBJECT claim PROGRAMS in HELLO and open the "
        "streams whose names match PATTERNS (and ids in RANGES) until it expires. "
        "The token is a secret: give it to the producer as a file or AQUEDUCT_TOKEN.",
    )
    issue.add_argument("--key", required=True, metavar="KEY", help="the private key (from token keygen)")
    issue.add_argument("--subject", required=True, metavar="NAME", help="who the token is for (logs, revocation)")
    issue.add_argument(
        "--streams", required=True, metavar="PATTERNS",
        help="comma-separated glob patterns of the stream names it may open (e.g. 'orders-*,audit')",
    )  # fmt: skip
    issue.add_argument(
        "--programs", metavar="PATTERNS",
        help="comma-separated glob patterns of the program/instance it may claim in HELLO "
        "(default: SUBJECT/*, the subject's own program, any instance)",
    )  # fmt: skip
    issue.add_argument(
        "--stream-ids", metavar="RANGES",
        help="also only these stream ids, inclusive ranges (e.g. '0-99,500'); default: any id",
    )  # fmt: skip
    issue.add_argument(
        "--expires", required=True, metavar="DURATION",
        help="how long it is valid from now: a whole number and s, m, h or d (1s, 10m, 12h, 30d)",
    )  # fmt: skip
    issue.add_argument("--json", action="store_true", help="print the token and its claims as JSON")

    inspect = actions.add_parser(
        "inspect",
        help="show what a token says, and with --pub whether it verifies now",
        description="Decode TOKEN and show its claims. Without --pub nothing is verified; with "
        "--pub, exit status 1 if a bridge holding those keys (and --revoked) would refuse it now.",
    )
    inspect.add_argument("token", metavar="TOKEN", help="the token, or - to read it from stdin (keeps it off ps)")
    inspect.add_argument(
        "--pub", action="append", metavar="PUB", help="public key file(s) to verify with (repeatable)"
    )
    inspect.add_argument("--revoked", metavar="FILE", help="a revocation file to check it against")
    inspect.add_argument("--json", action="store_true", help="print the claims and the verdict as JSON")


def _read(path: str, option: str, command: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"{option}: cannot read {path}: {exc.strerror}", command) from None


def _write(path: Path, data: bytes, mode: int, force: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (0 if force else os.O_EXCL)
    fd = os.open(path, flags, mode)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), mode)  # an overwritten file keeps its old mode otherwise
        f.write(data)


def _keygen(args: argparse.Namespace) -> int:
    key_path, pub_path = Path(args.key), Path(args.pub)
    if key_path.resolve() == pub_path.resolve():
        raise UsageError("--key and --pub name the same file", "token keygen")
    if not args.force:
        for path in (key_path, pub_path):
            if path.exists():
                raise UsageError(f"refusing to overwrite {path} (use --force)", "token keygen")
    private_key = Ed25519PrivateKey.generate()
    try:
        _write(key_path, private_key_pem(private_key), 0o600, args.force)
        _write(pub_path, public_key_pem(private_key.public_key()), 0o644, args.force)
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename}: {exc.strerror}", "token keygen") from None
    kid = key_id(private_key.public_key())
    if args.json:
        print(json.dumps({"key_id": kid, "key": str(key_path), "pub": str(pub_path)}))
    else:
        print(f"key id      {kid}\nprivate key {key_path} (mode 0600: keep it off the bridges)\npublic key  {pub_path}")
    return 0


def _option(parse: Any, text: str, option: str) -> Any:
    try:
        return parse(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}", "token issue") from None


def _issue(args: argparse.Namespace) -> int:
    lifetime = _option(parse_duration, args.expires, "--expires")
    streams = _option(parse_patterns, args.streams, "--streams")
    programs = None if args.programs is None else _option(parse_patterns, args.programs, "--programs")
    ids = None if args.stream_ids is None else _option(parse_id_ranges, args.stream_ids, "--stream-ids")
    try:
        private_key = load_private_key(_read(args.key, "--key", "token issue"))
    except ValueError as exc:
        raise UsageError(f"--key: {args.key}: {exc}", "token issue") from None
    try:
        token = issue_token(
            private_key, subject=args.subject, streams=streams, programs=programs, stream_ids=ids,
            now=int(time.time()), lifetime=lifetime,
        )  # fmt: skip
    except ValueError as exc:
        raise UsageError(str(exc), "token issue") from None
    print(json.dumps({"token": token, **_summary(decode_token(token))}) if args.json else token)
    return 0


def _iso(seconds: int) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _summary(claims: TokenClaims) -> dict[str, Any]:
    return {
        **claims.as_json(),
        "issued_at": _iso(claims.issued_at),
        "expires_at": _iso(claims.expires_at),
    }


def _inspect(args: argparse.Namespace) -> int:
    if args.revoked is not None and not args.pub:
        raise UsageError("--revoked needs --pub: only a verified token is checked for revocation", "token inspect")
    text = sys.stdin.readline().strip() if args.token == "-" else args.token.strip()
    try:
        claims = decode_token(text)
    except TokenRefused as exc:
        raise UsageError(f"not a token: {exc}", "token inspect") from None
    verdict: dict[str, Any] = {"verified": None, "refusal": None}
    if args.pub:
        keys = KeyRing()
        for path in args.pub:
            try:
                keys = keys.merged(KeyRing.from_pem(_read(path, "--pub", "token inspect")))
            except ValueError as exc:
                raise UsageError(f"--pub: {path}: {exc}", "token inspect") from None
        revoked = NO_REVOCATIONS
        if args.revoked is not None:
            source = _read(args.revoked, "--revoked", "token inspect")
            try:
                revoked = parse_revocations(source.decode("utf-8", "replace"), args.revoked)
            except AuthFileError as exc:
                raise UsageError(f"--revoked: {exc}", "token inspect") from None
        try:
            verify_token(text, keys, time.time(), revoked)
            verdict = {"verified": True, "refusal": None}
        except TokenRefused as exc:
            verdict = {"verified": False, "refusal": exc.reason.value, "detail": exc.detail}
    if args.json:
        print(json.dumps({**_summary(claims), **verdict}))
    else:
        ids = ",".join(f"{low}-{high}" for low, high in claims.as_json().get("ids", [])) or "any"
        if verdict["verified"] is None:
            verified = "not checked (give --pub to verify)"
        else:
            verified = "yes" if verdict["verified"] else f"REFUSED, {verdict['refusal']}: {verdict['detail']}"
        print(
            f"subject   {claims.subject}\nprograms  {','.join(claims.programs)}\n"
            f"streams   {','.join(claims.streams)}\nids       {ids}\n"
            f"issued    {_iso(claims.issued_at)}\nexpires   {_iso(claims.expires_at)}\n"
            f"token id  {claims.token_id}\nkey id    {claims.key_id}\nverified  {verified}"
        )
    return 1 if verdict["verified"] is False else 0


def token_command(args: argparse.Namespace) -> int:
    """Run ``aqueduct token SUBCOMMAND`` (parsed by :func:`add_token_parser`); returns the exit status."""
    run = {"keygen": _keygen, "issue": _issue, "inspect": _inspect}[args.token_command]
    return run(args)
