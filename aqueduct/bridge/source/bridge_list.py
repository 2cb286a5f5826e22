"""The bridges behind a failover query: the ``bridgeList`` file, and which bridges are left out.

``bridgeList`` names a file on the driver, one bridge per line::

    # name  HOST:PORT        [token=FILE]          [ca=FILE]
    eu-1    10.0.0.5:8815    token=/etc/aq/eu.token  ca=/etc/aq/ca.pem
    eu-2    10.0.0.6:8815

Blank lines and ``#`` comments are ignored; ``token``/``ca`` default to
the ``bridgeTokenFile``/``bridgeTokenEnv`` and ``bridgeCA`` options. The
reader reads it again at every trigger, so an operator adds a bridge (its
streams are read from then on, its registry gets the query's consumer)
or removes one (forgotten) by rewriting the file: write a new file and
rename it over the old one, so a trigger never reads half of it.

:class:`Membership` decides, from what each bridge's calls did, which
bridges planning uses: one whose calls fail is *held* (its copies stop no
stream from waiting for it, but are not read) for ``bridgeTimeout``
seconds, then left out. Times are handed in: nothing here reads a clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BridgeEntry",
    "BridgeListError",
    "Membership",
    "parse_bridge_list",
    "read_bridge_list",
    "split_address",
]

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_FIELDS = ("token", "ca")


def split_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[v6]:PORT`` to ``(host, port)``; raises ValueError with the reason."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError(f"a bridge address is HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


class BridgeListError(ValueError):
    """A ``bridgeList`` file that cannot be used (the message names the file and line)."""


@dataclass(frozen=True)
class BridgeEntry:
    """One line of a bridge list: a bridge's name, ``HOST:PORT``, and its credential files (None: the options')."""

    name: str
    address: str
    token_file: str | None = None
    ca_file: str | None = None


def parse_bridge_list(text: str, where: str) -> tuple[BridgeEntry, ...]:
    """The bridges of a bridge list's ``text`` (``where``: the file, for errors), in file order."""
    entries: list[BridgeEntry] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        problem = _line_problem(line.split())
        if problem:
            raise BridgeListError(
                f"bridge list {where} line {number}: {problem} (a line is NAME HOST:PORT [token=FILE] "
                f"[ca=FILE]), got {raw.strip()!r}"
            )
        name, address, *rest = line.split()
        fields = dict(part.split("=", 1) for part in rest)
        if any(e.name == name for e in entries):
            raise BridgeListError(
                f"bridge list {where} line {number}: bridge {name!r} is listed twice"
            )
        entries.append(BridgeEntry(name, address, fields.get("token"), fields.get("ca")))
    return tuple(entries)


def _line_problem(words: list[str]) -> str | None:
    """What is wrong with a line's words, or None."""
    if len(words) < 2:
        return "a bridge needs a name and an address"
    if not _NAME.fullmatch(words[0]):
        return f"the name {words[0]!r} must be 1-64 letters, digits, '-' or '_'"
    try:
        split_address(words[1])
    except ValueError as e:
        return str(e)
    for part in words[2:]:
        key, sep, value = part.partition("=")
        if not sep or key not in _FIELDS or not value:
            return f"unknown field {part!r}"
    return None


def read_bridge_list(path: str) -> tuple[BridgeEntry, ...]:
    """The bridges of the file at ``path``; :class:`BridgeListError` if it cannot be read or parsed."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise BridgeListError(f"cannot read bridge list {path!r}: {e.strerror}") from None
    return parse_bridge_list(text, repr(path))


class Membership:
    """Which bridges planning uses, from the outcome of each bridge's calls (times in seconds, handed in)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._failing_since: dict[str, float] = {}

    def answered(self, name: str) -> None:
        """A call to ``name`` succeeded: it is in."""
        self._failing_since.pop(name, None)

    def failed(self, name: str, now: float) -> None:
        """A call to ``name`` failed to reach it at ``now`` (the first failure starts its clock)."""
        self._failing_since.setdefault(name, now)

    def forget(self, name: str) -> None:
        """``name`` left the list."""
        self._failing_since.pop(name, None)

    def held(self, name: str, now: float) -> bool:
        """Failing, but for less than the timeout: its streams wait for it, its copies are not read."""
        since = self._failing_since.get(name)
        return since is not None and now - since < self.timeout

    def left_out(self, name: str, now: float) -> bool:
        """Failing for the timeout or longer: planning goes on as if it were not there."""
        since = self._failing_since.get(name)
        return since is not None and now - since >= self.timeout
