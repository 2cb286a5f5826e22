"""What an identity may write: program/instance patterns, stream name patterns, stream id ranges.

Patterns are shell globs (:func:`fnmatch.fnmatchcase`: ``*``, ``?``,
``[seq]``, case-sensitive), matched against the whole name; the CLI and
the files separate several with commas, so a pattern holds no comma. Program
patterns match ``program/instance`` as the connector names itself in HELLO
(``billing/*``: any instance of ``billing``). Stream id ranges are
inclusive (``100-199``, ``7``); without any, every id is allowed.

A check returns ``None`` when allowed, else a :class:`Denied` naming the
rule (where the permissions came from, and the patterns it failed), so the
producer's ERROR and the bridge's log say which line or token to change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from aqueduct.auth.refusals import Refusal

__all__ = ["ANYTHING", "Denied", "IdRange", "Permissions", "parse_id_ranges", "parse_patterns"]

_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF
_RANGE = re.compile(r"([0-9]{1,20})(?:-([0-9]{1,20}))?")


@dataclass(frozen=True, slots=True)
class IdRange:
    """Stream ids ``low`` to ``high``, both included."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.high <= _U64_MAX:
            raise ValueError(f"stream id range {self.low}-{self.high} is not 0 <= low <= high < 2**64")

    def __contains__(self, stream_id: object) -> bool:
        return isinstance(stream_id, int) and self.low <= stream_id <= self.high

    def __str__(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


def parse_patterns(text: str) -> tuple[str, ...]:
    """``"orders-*, audit"`` -> ``("orders-*", "audit")``; ValueError for none or an empty one."""
    patterns = tuple(p.strip() for p in text.split(","))
    if not text.strip() or any(not p for p in patterns):
        raise ValueError(f"expected comma-separated patterns, got {text!r}")
    return patterns


def parse_id_ranges(text: str) -> tuple[IdRange, ...]:
    """``"0-99,500"`` -> ``(IdRange(0, 99), IdRange(500, 500))``; ValueError names the bad part."""
    ranges = []
    for part in text.split(","):
        found = _RANGE.fullmatch(part.strip())
        if found is None:
            raise ValueError(f"expected stream ids like 0-99,500, got {part.strip()!r}")
        low, high = found.group(1), found.group(2) or found.group(1)
        ranges.append(IdRange(int(low), int(high)))
    return tuple(ranges)


@dataclass(frozen=True, slots=True)
class Denied:
    """A refused HELLO or NOTIFY: the reason (a metrics label) and the rule that refused it."""

    reason: Refusal
    message: str  #: what was asked and which rule refused it, for the ERROR and the log

    def __str__(self) -> str:
        return f"{self.reason.value}: {self.message}"


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)


@dataclass(frozen=True, slots=True)
class Permissions:
    """One grant: which connector names it may claim and which streams it may open.

    ``source`` says where the grant was written (``token 3f9c... (subject 'orders')``,
    ``acl.conf:12``): every refusal names it.
    """

    programs: tuple[str, ...]
    streams: tuple[str, ...]
    stream_ids: tuple[IdRange, ...] | None  #: None: any stream id
    source: str

    def check_program(self, program: str, instance: str) -> Denied | None:
        """May a connector under these permissions call itself ``program/instance`` in HELLO?"""
        name = f"{program}/{instance}"
        if _matches(name, self.programs):
            return None
        return Denied(
            Refusal.PROGRAM_NOT_ALLOWED,
            f"program {name!r} is not in programs {','.join(self.programs)} of {self.source}",
        )

    def check_stream(self, stream_id: int, stream_name: str) -> Denied | None:
        """May it open (NOTIFY) stream ``stream_id`` named ``stream_name``? Both name and id must pass."""
        if not _matches(stream_name, self.streams):
            return Denied(
                Refusal.STREAM_NOT_ALLOWED,
                f"stream {stream_name!r} (id {stream_id}) is not in streams {','.join(self.streams)} of {self.source}",
            )
        if self.stream_ids is not None and not any(stream_id in r for r in self.stream_ids):
            return Denied(
                Refusal.STREAM_ID_NOT_ALLOWED,
                f"stream id {stream_id} ({stream_name!r}) is not in ids {','.join(map(str, self.stream_ids))} "
                f"of {self.source}",
            )
        return None


#: every program, stream name and id: the shared cookie's (development) permissions
ANYTHING = Permissions(("*",), ("*",), None, "the shared cookie")
