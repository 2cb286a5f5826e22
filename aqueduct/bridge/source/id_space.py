"""One stream across bridges, in points of reference: the rules of a failover read (sans-IO).

A producer's message ids strictly increase per stream, and the same id
is always the same record, so a record is ``(stream id, message id)``
wherever it is stored. A point of reference ``P`` is an exclusive upper
bound: "every stable record with an id below ``P``". Every stored record
carries ``reference``, the stream's point *after* it, so a stable record
belongs to the range of points ``(lo, hi]`` iff ``lo < reference <= hi``
(:func:`belongs`): the same records whichever bridge's log holds them. A
record without a stable id (EPHEMERAL, UNSTABLE_REFERENCE) carries the
point of the stable record before it and goes with it: it belongs iff
``lo <= reference < hi``, so one that opens an epoch (after the BOUNDARY
that ended the range before) is read with its epoch, once.

A **copy** is one bridge's log of one stream (:class:`Copy`): it holds
every record whose reference is above ``start`` and whose epoch closed
before ``complete``. A query's place in a stream is a point; a batch is a
range of points per stream, cut into :class:`Piece` s each readable
whole from one copy (:func:`cut`); a point no copy holds, while a copy
holds later ones, is lost data (:class:`Gap`). A committed point is told
to each bridge as its own log offset (:func:`commit_offset`), so every
bridge acks its producers, whichever copy was read.

What it does not cover, said rather than read wrong: an UNORDERED or
UNRELIABLE stream (:func:`refused_mode`), whose point is the first id not
yet received, so a record's point depends on the order a bridge received
the stream in and two copies disagree; and records without a stable id
after a stream's last stable one (on a stream without BOUNDARY records),
which belong to the range that ends at its next stable record and wait
for it; a stream with none at all (:func:`holds_stable`) waits forever.

A copy's ``epoch`` column is its own counter, so a producer that moved
leaves two epochs with one number on two bridges. A failover read names an
epoch by the point where it starts instead, the reference before its
first record (:func:`epoch_points`): the same from every copy, shared by
the rows of one epoch, increasing along the stream.

Nothing here reads a file, a socket or a clock: the failover reader
(:mod:`aqueduct.bridge.source.failover`) gives it numbers and index
entries, and the model test drives it the same way.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from aqueduct.bridge.storage.index import IndexEntry
from aqueduct.wire.modes import Mode

__all__ = [
    "BEFORE_ALL", "Copy", "EpochCarry", "Gap", "Piece", "belongs", "commit_offset", "copy_start", "cut", "epoch_points",
    "gap_records", "holds_stable", "reach", "read_span", "refused_mode", "span_entries",
]  # fmt: skip

#: The point before a stream's first record: records with no stable id that
#: open a stream carry reference 0, and ``BEFORE_ALL < 0`` takes them in.
BEFORE_ALL = -1


@dataclass(frozen=True)
class Copy:
    """One bridge's log of one stream, as points: records with ``start < reference``, whole epochs below ``complete``."""

    bridge: str
    start: int
    complete: int

    def covers(self, point: int) -> bool:
        """The copy holds the records just after ``point`` (and at least one whole epoch of them)."""
        return self.start <= point < self.complete


@dataclass(frozen=True)
class Piece:
    """Records ``(lo, hi]`` of ``stream``, each of ``candidates`` (bridge names, preferred first) holding them all."""

    stream: int
    lo: int
    hi: int
    candidates: tuple[str, ...]


@dataclass(frozen=True)
class Gap:
    """Records ``(lo, hi]`` of ``stream`` that no copy holds while a copy holds later ones: lost."""

    stream: int
    lo: int
    hi: int


def belongs(reference: int, stable: bool, lo: int, hi: int) -> bool:
    """Whether a record with this stored ``reference`` (the point after it) belongs to ``(lo, hi]``.

    A stable record is the one that moved the point to ``reference``; one
    without a stable id follows the stable record whose point it carries.
    """
    return lo < reference <= hi if stable else lo <= reference < hi


def refused_mode(mode: Mode) -> str | None:
    """Why a stream of this delivery mode cannot be read in points of reference, or None (ORDERED: it can).

    An ORDERED stream's point after a record is that record's id + 1 on
    every bridge. An UNORDERED or UNRELIABLE stream's point is the first
    id not yet received: the same record carries different points on two
    bridges that received the stream in different orders (and an UNRELIABLE
    stream's point stops at its first lost record), so ranges of points
    would read some records twice and miss others.
    """
    if mode is Mode.ORDERED:
        return None
    return (
        f"{mode.name}: a failover query reads ORDERED streams only (the point of reference of an {mode.name} "
        "stream is the first id not yet received, so its records carry different points on different bridges)"
    )


def holds_stable(entries: Sequence[IndexEntry]) -> bool:
    """Whether a copy holds a record with a stable id: on an ORDERED stream each one moves the point.

    A copy that holds records but none with a stable id (EPHEMERAL or
    UNSTABLE_REFERENCE only) has no point to read them up to.
    """
    return bool(entries) and entries[-1].reference_after != entries[0].reference_before


def gap_records(lo: int, hi: int) -> int:
    """At most how many records a gap ``(lo, hi]`` held: one per message id from ``lo`` (id 0 from the start) below ``hi``."""
    return hi - max(lo, 0)


def copy_start(entries: Sequence[IndexEntry]) -> int:
    """Where a copy starts: the point before its first retained record (:data:`BEFORE_ALL` from the stream's start)."""
    first = entries[0]
    if first.first_offset == 0 and first.reference_before == 0:
        return BEFORE_ALL
    return first.reference_before


def reach(
    copies: Iterable[Copy], lo: int, held: Iterable[Copy] = ()
) -> tuple[int, list[tuple[int, int]]]:
    """How far a stream reads from ``lo`` over ``copies``: the end point and the gaps passed.

    From each point the copy covering it that goes furthest is followed. A
    point no copy covers is a gap if a copy starts later (the records in
    between are held by none), unless a copy of ``held`` (a bridge that
    does not answer, not yet left out) covers it: then the stream waits
    there. With no copy further on, the stream ends there (nothing more
    has arrived anywhere yet).
    """
    copies, held = list(copies), list(held)
    point, gaps = lo, []
    while True:
        covering = [c.complete for c in copies if c.covers(point)]
        if covering:
            point = max(covering)
            continue
        if any(c.covers(point) for c in held):
            return point, gaps
        later = [c.start for c in copies if c.start > point]
        if not later:
            return point, gaps
        gaps.append((point, min(later)))
        point = min(later)


def cut(
    stream: int, lo: int, hi: int, copies: Iterable[Copy], preference: Sequence[str]
) -> list[Piece | Gap]:
    """``(lo, hi]`` of ``stream`` as pieces, each readable whole from one copy, and gaps.

    Each piece runs from its start to the furthest end of a copy covering
    it (capped at ``hi``); its candidates are every copy covering it all,
    in ``preference`` order (bridges not in it last, by name). The end of
    a piece is a copy's ``complete``, an epoch's end, so no epoch is split.
    A stretch no copy holds while a later one is held is a :class:`Gap`; a
    tail no copy holds (its bridge went away since the range was planned)
    is a piece without candidates, for the reader to find a copy of.
    """
    copies = list(copies)
    rank = {name: i for i, name in enumerate(preference)}
    order = sorted(copies, key=lambda c: (rank.get(c.bridge, len(rank)), c.bridge))
    out: list[Piece | Gap] = []
    point = lo
    while point < hi:
        covering = [c.complete for c in copies if c.covers(point)]
        if not covering:
            later = [c.start for c in copies if point < c.start < hi]
            if not later:  # held by none now: whoever holds it at read time serves it
                out.append(Piece(stream, point, hi, ()))
                break
            out.append(Gap(stream, point, min(later)))
            point = min(later)
            continue
        end = min(hi, max(covering))
        names = tuple(
            dict.fromkeys(c.bridge for c in order if c.start <= point and c.complete >= end)
        )
        out.append(Piece(stream, point, end, names))
        point = end
    return out


def commit_offset(
    entries: Sequence[IndexEntry], point: int, reference_at: Callable[[int], int]
) -> int | None:
    """The log offset of a copy that says "committed up to ``point``": an epoch's end, never past ``point``.

    The largest end of a closed epoch whose point of reference is at most
    ``point`` that the index tells directly (an entry's ``complete_after``
    for the last entry ending at or below ``point``), or the last epoch end
    inside the next entry when one record lookup (``reference_at``) shows it
    is not past ``point``. The bridge acks ``reference_at`` of it, so it acks
    nothing the query has not committed. None: the copy holds no such end.
    """
    if not entries:
        return None
    k = bisect.bisect_right(entries, point, key=lambda e: e.reference_after) - 1
    found = entries[k].complete_after if k >= 0 else None
    if k + 1 < len(entries):
        inner = entries[k + 1].complete_after
        inside = entries[k + 1].first_offset < inner < entries[k + 1].end_offset
        if inside and (found is None or inner > found) and reference_at(inner) <= point:
            found = inner
    if found is None or found < entries[0].first_offset:
        return None
    return found


def span_entries(entries: Sequence[IndexEntry], lo: int, hi: int) -> tuple[int, int]:
    """Indexes ``[first, last)`` of the entries that may hold records of ``(lo, hi]`` (see :func:`read_span`)."""
    first = bisect.bisect_left(entries, lo, key=lambda e: e.reference_after)
    last = bisect.bisect_right(entries, hi, key=lambda e: e.reference_before)
    return first, max(first, last)


def read_span(entries: Sequence[IndexEntry], lo: int, hi: int, complete_offset: int) -> tuple[int, int]:
    """Log offsets ``[start, end)`` of a copy that hold every record of ``(lo, hi]`` in closed epochs.

    Whole index entries (a superset: the reader keeps only the rows that
    :func:`belongs`), from the first entry reaching ``lo`` to the last one
    starting at or below ``hi``, never past the closed epochs.
    """
    first, last = span_entries(entries, lo, hi)
    if first == last:
        return 0, 0
    end = min(entries[last - 1].end_offset, complete_offset)
    return min(entries[first].first_offset, end), end


@dataclass(frozen=True)
class EpochCarry:
    """Where :func:`epoch_points` left off: what the next row of the stream needs from the rows before it.

    ``point`` names the open epoch, ``reference`` is the last row's;
    ``epoch`` is the last row's value in the copy's own counter (None when
    the next row comes from another copy, whose counter differs: then
    ``closed`` says whether the last row ended its epoch).
    """

    point: int
    reference: int
    epoch: int | None = None
    closed: bool = False

    @classmethod
    def at(cls, lo: int) -> EpochCarry:
        """Before the first record after ``lo``, an epoch's end (where pieces start): its epoch starts at ``lo``."""
        return cls(lo, lo, None, True)

    def other_copy(self, closed: bool) -> EpochCarry:
        """The same place, the next rows read from another copy; ``closed``: the last row ended its epoch."""
        return replace(self, epoch=None, closed=closed)


def epoch_points(epochs: np.ndarray, references: np.ndarray, carry: EpochCarry) -> tuple[np.ndarray, EpochCarry]:
    """Each row's epoch as the point where it starts (the reference before its first record), and the carry on.

    ``epochs`` is one copy's own epoch counter of consecutive rows (BOUNDARY
    rows included: they end the epoch they are in), ``references`` their
    stored points. A row whose counter differs from the row before starts
    an epoch, at the point the row before carries; the others inherit it.
    The counter changes where the producer's epochs do, so every copy gives
    the same points.
    """
    n = len(epochs)
    if n == 0:
        return np.empty(0, np.int64), carry
    starts = np.empty(n, dtype=bool)
    starts[1:] = epochs[1:] != epochs[:-1]
    starts[0] = carry.closed if carry.epoch is None else bool(epochs[0] != carry.epoch)
    before = np.empty(n, dtype=np.int64)
    before[0] = carry.reference
    before[1:] = references[:-1]
    last_start = np.maximum.accumulate(np.where(starts, np.arange(n), -1))
    points = np.where(last_start >= 0, before[np.maximum(last_start, 0)], carry.point)
    return points, EpochCarry(int(points[-1]), int(references[-1]), int(epochs[-1]), False)
