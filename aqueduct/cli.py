"""The ``aqueduct`` console script.

Subcommands:

* ``aqueduct certs DIR [--hosts localhost,127.0.0.1] [--days N] [--json] [--force]``:
  create a local CA plus server and client certificates for TLS / mutual TLS.
* ``aqueduct token keygen|issue|inspect``: the operator's key pair and the
  signed producer tokens it issues (:mod:`aqueduct.auth.tokens`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from aqueduct.console import UsageError, add_version, positive_int, run
from aqueduct.runtime.certs import DEFAULT_HOSTS, generate_certs
from aqueduct.token_cli import add_token_parser, token_command

# The production notes ship in the wheel (package data), so --help names a file every install has.
CERTS_GUIDE = Path(__file__).resolve().parent / "guides" / "certs.md"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aqueduct", description="Aqueduct: message channels over QUIC."
    )
    add_version(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    certs = sub.add_parser(
        "certs",
        help="create a local CA and server/client certificates",
        description=(
            "Create DIR/ca.pem (producers' --cafile), DIR/client-ca.pem (the bridge's "
            "--client-ca: the same CA, named for that role), DIR/server.pem, DIR/server.key, "
            "DIR/client.pem and DIR/client.key: a throw-away CA and certificates it signed, "
            f"for development and tests. For production see {CERTS_GUIDE} (certs/README.md "
            "in a checkout)."
        ),
    )
    certs.add_argument("directory", metavar="DIR", help="where to write the files")
    certs.add_argument(
        "--hosts",
        default=",".join(DEFAULT_HOSTS),
        help="comma-separated DNS names / IP addresses of the server (default: %(default)s)",
    )
    certs.add_argument(
        "--days", type=positive_int, default=365, help="validity in days (default: %(default)s)"
    )
    certs.add_argument("--json", action="store_true", help="print the file paths as JSON")
    certs.add_argument("--force", action="store_true", help="overwrite existing files")
    add_token_parser(sub)
    return parser


def _certs(args: argparse.Namespace) -> int:
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    try:
        paths = generate_certs(args.directory, hosts, days=args.days, overwrite=args.force)
    except OSError as exc:  # refusing to overwrite; the directory names a file or cannot be written
        raise UsageError(f"certs: {args.directory}: {exc.strerror}" if exc.strerror else str(exc)) from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps({**paths.as_dict(), "hosts": hosts, "days": args.days}))
    else:
        for role, path in paths.as_dict().items():
            print(f"{role:12} {path}")
    return 0


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "certs":
        return _certs(args)
    if args.command == "token":
        return token_command(args)
    raise AssertionError(f"unhandled command {args.command}")  # argparse rejects others


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``aqueduct`` console script; returns the exit status (2 for bad input)."""
    return run("aqueduct", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
