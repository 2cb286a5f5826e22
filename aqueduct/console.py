"""What every console script shares: ``--version``, one-line errors, secrets kept off ``ps``.

A user's mistake (a wrong URL, a missing file, a busy port) must end in one
line naming it and exit status 2, never a traceback: :class:`UsageError`
carries such a line out of a command, and :func:`run` turns it (and any
``OSError`` about a path the user named, re-raised as one) into that line.
A reader that closes the output early (``aqueduct-bridge status | head``)
is not an error either: :func:`run` leaves quietly, as ``cat`` does.

This module imports nothing else of the package, so every layer's command
may use it.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "BROKEN_PIPE_STATUS",
    "COOKIE_ENV",
    "UsageError",
    "add_secret_options",
    "add_version",
    "non_negative_int",
    "positive_float",
    "positive_int",
    "read_secret",
    "run",
]

#: the environment variable the cookie may come from, on the bridge and the producer alike
COOKIE_ENV = "AQUEDUCT_COOKIE"

#: exit status after the reader closed our stdout: what a shell reports for a
#: process killed by SIGPIPE (128 + 13), like ``cat`` or ``yes`` in a pipe.
BROKEN_PIPE_STATUS = 141


class UsageError(Exception):
    """Bad input from the user: printed as ``PROG [COMMAND]: MESSAGE``, exit status 2."""

    def __init__(self, message: str, command: str | None = None) -> None:
        super().__init__(message)
        self.command = command


def add_version(parser: argparse.ArgumentParser) -> None:
    """``--version``: the one version of the package (``aqueduct.__version__``)."""
    from aqueduct import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")


def _number(text: str, parse: Callable[[str], Any], ok: Callable[[Any], bool], what: str) -> Any:
    """``parse(text)`` if it is ``what`` (``ok``), else argparse's one-line error naming it."""
    try:
        value = parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer above 0."""
    return _number(text, int, lambda v: v > 0, "a positive integer")


def non_negative_int(text: str) -> int:
    """argparse type: an integer of 0 or more."""
    return _number(text, int, lambda v: v >= 0, "a non-negative integer")


def positive_float(text: str) -> float:
    """argparse type: a number above 0 (not NaN or infinite)."""
    return _number(text, float, lambda v: 0 < v < math.inf, "a positive number")


def non_negative_float(text: str) -> float:
    """argparse type: a number of 0 or more (not NaN or infinite)."""
    return _number(text, float, lambda v: 0 <= v < math.inf, "a number of 0 or more")


def add_secret_options(parser: argparse.ArgumentParser, env: str, what: str) -> None:
    """``--cookie-file PATH`` and the environment variable ``env``: a secret that stays off ``ps``.

    ``--cookie VALUE`` is kept for development, but anything on a command
    line is visible to every user of the machine (``ps``, ``/proc``), so
    the help points at the file and the variable instead.
    """
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--cookie-file", metavar="PATH",
        help=f"read {what} from this file (its first line; trailing newline ignored). "
        f"Or set the environment variable {env}",
    )  # fmt: skip
    group.add_argument(
        "--cookie", default=None, metavar="SECRET",
        help=f"{what} given on the command line: visible in `ps` to every user, so for "
        f"development only; prefer --cookie-file or {env}",
    )  # fmt: skip


def read_secret(args: argparse.Namespace, env: str) -> bytes:
    """The cookie from ``--cookie-file``, else ``--cookie``, else ``$env``, else empty.

    A file that cannot be read, or is empty, is a :class:`UsageError`: a
    producer or bridge that silently runs without the secret it was given
    would be refused (or would admit everyone) for a reason nobody sees.
    """
    if args.cookie_file is not None:
        try:
            with open(args.cookie_file, "rb") as f:
                secret = f.readline().rstrip(b"\r\n")
        except OSError as exc:
            raise UsageError(f"--cookie-file: cannot read {args.cookie_file}: {exc.strerror}") from None
        if not secret:
            raise UsageError(f"--cookie-file: {args.cookie_file} is empty")
        return secret
    if args.cookie is not None:
        return args.cookie.encode()
    return os.environ.get(env, "").encode()


def run(prog: str, main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None) -> int:
    """Run a command's ``main``: a :class:`UsageError` is one line and exit 2, a closed stdout is quiet.

    Output is flushed here, inside the guard, so a reader that went away
    (``| head``) is noticed now rather than as a traceback at exit; stdout
    then points at ``/dev/null`` so the interpreter's own final flush
    cannot fail again.
    """
    try:
        status = main(argv)
        sys.stdout.flush()
    except UsageError as exc:
        print(f"{prog} {exc.command}: {exc}" if exc.command else f"{prog}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE_STATUS
    except KeyboardInterrupt:
        return 130
    return status
