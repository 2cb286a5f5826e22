"""An executor's side of a failover read: a planned piece of a stream, from whichever bridge can serve it.

A :class:`PlannedPiece` is a stream's records ``(lo, hi]`` in points of
reference (:mod:`aqueduct.bridge.source.id_space`), with the planner's
snapshot of each copy that held them all (:class:`PlannedCopy`, preferred
first) and every other bridge of the query. :func:`read_piece` reads the
piece from the first copy that covers it, keeps the rows whose stored
``reference`` puts them in the range, and when a bridge cannot be reached (or
its log is gone) goes on from the last point it yielded with the next
copy; when none of the planned copies is left, it looks at every bridge
afresh (a producer that moved has resent the records to another one),
waiting up to :data:`READ_WAIT` seconds for one to hold them. So a
retried task, or a batch re-executed after a restart, yields the same
stable records from any bridge.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.flight as flight

from aqueduct.bridge.source.flight_client import UNREACHABLE
from aqueduct.bridge.source.id_space import (
    Copy,
    EpochCarry,
    Piece,
    copy_start,
    epoch_points,
    reach,
    read_span,
    span_entries,
)
from aqueduct.bridge.source.log_access import LogAccess
from aqueduct.bridge.source.planning import Slice
from aqueduct.bridge.storage.index import IndexEntry
from aqueduct.bridge.storage.schema import SPARK_COLUMNS
from aqueduct.bridge.storage.view import NotALog, StreamIndex

logger = logging.getLogger(__name__)

#: Seconds a piece waits for some bridge to hold its records before the task fails (Spark retries it).
READ_WAIT = 60.0

#: What "this bridge cannot serve now" looks like: Flight unreachable, a log directory gone.
GONE = (*UNREACHABLE, OSError, NotALog)


class StaleCopy(RuntimeError):
    """A copy's records are not those its planned index entries describe (its log was replaced since)."""


#: What makes a reader try the next copy: the bridge gone, its log replaced, or an error it answers
#: a read with (a range no longer stored); a batch failing its checksum is data loss, not this.
CANNOT_SERVE = (*GONE, StaleCopy, flight.FlightServerError)


#: Bridges (name, address) whose last read in this process failed: the pieces read next try them last,
#: so a dead bridge costs one failed call per worker, not one per piece. A read it serves clears it.
_FAILED: set[tuple[str, str]] = set()


def _key(c: PlannedCopy) -> tuple[str, str]:
    return c.copy.bridge, str(getattr(c.access, "address", c.directory))


def failed_last(copies: Sequence[PlannedCopy]) -> list[PlannedCopy]:
    """``copies`` in their order, those on a bridge whose last read here failed moved to the back."""
    return sorted(copies, key=lambda c: _key(c) in _FAILED)


class PieceUnavailable(RuntimeError):
    """No bridge of the query held a planned piece's records within :data:`READ_WAIT` seconds."""


class PieceLost(RuntimeError):
    """A bridge holds later records of the stream but none holds the piece's: they are gone."""


@dataclass(frozen=True)
class PlannedCopy:
    """One bridge's copy of a stream as a snapshot saw it: its points and the index entries to read it by."""

    copy: Copy
    access: LogAccess
    directory: str
    entries: Sequence[IndexEntry]
    complete_offset: int

    @classmethod
    def of(cls, name: str, access: LogAccess, s: StreamIndex, complete: int) -> PlannedCopy:
        """``s`` (a snapshot from ``access``), whose closed epochs end at point ``complete``."""
        return cls(Copy(name, copy_start(s.entries), complete), access, str(s.directory), s.entries, s.complete)

    def for_range(self, lo: int, hi: int) -> PlannedCopy:
        """The same copy with only the index entries that may hold ``(lo, hi]``: what a partition carries."""
        first, last = span_entries(self.entries, lo, hi)
        return PlannedCopy(self.copy, self.access, self.directory, self.entries[first:last], self.complete_offset)


@dataclass(frozen=True)
class PlannedPiece:
    """A piece, its planned copies (preferred first) and the query's other bridges (looked at if those fail)."""

    piece: Piece
    copies: tuple[PlannedCopy, ...]
    others: tuple[tuple[str, LogAccess], ...]

    def records(self) -> int:
        """About how many records (of its first copy): what partitions are packed by."""
        if not self.copies:
            return 1
        c = self.copies[0]
        start, end = read_span(c.entries, self.piece.lo, self.piece.hi, c.complete_offset)
        return max(1, end - start)


def complete_point(s: StreamIndex) -> int:
    """The point of reference at the end of ``s``'s closed epochs (its start when none closed)."""
    if not s.entries or s.complete <= s.earliest:
        return copy_start(s.entries) if s.entries else 0
    last = s.entries[-1]
    if s.complete == last.end_offset:
        return last.reference_after
    return s.reference_at(s.complete)


def rows_in(batch: pa.RecordBatch, lo: int, hi: int) -> pa.RecordBatch:
    """The Spark rows of ``batch`` that belong to ``(lo, hi]`` (:func:`~.id_space.belongs`), BOUNDARY markers left out.

    Stable records: ``lo < reference <= hi``; the others: ``lo <= reference < hi``.
    """
    import pyarrow.compute as pc

    ref, stable = batch.column("reference"), batch.column("stable")
    by_stable = pc.and_(pc.greater(ref, lo), pc.less_equal(ref, hi))
    by_unstable = pc.and_(pc.greater_equal(ref, lo), pc.less(ref, hi))
    keep = pc.and_(pc.invert(batch.column("boundary")), pc.if_else(stable, by_stable, by_unstable))
    return batch.filter(keep).select(list(SPARK_COLUMNS))


def with_epoch_points(batch: pa.RecordBatch, carry: EpochCarry) -> tuple[pa.RecordBatch, EpochCarry]:
    """``batch`` (stored columns, BOUNDARY rows included) with its ``epoch`` column as points (:func:`~.id_space.epoch_points`)."""
    epochs = batch.column("epoch").to_numpy(zero_copy_only=False)
    references = batch.column("reference").to_numpy(zero_copy_only=False)
    points, carry = epoch_points(epochs, references, carry)
    at = batch.schema.get_field_index("epoch")
    return batch.set_column(at, batch.schema.field(at), pa.array(points, pa.int64())), carry


def _read_copy(
    c: PlannedCopy, stream: int, lo: int, hi: int, skip_corrupt: bool, carry: EpochCarry
) -> Iterator[tuple[pa.RecordBatch, int, EpochCarry]]:
    """Rows of ``(lo, hi]`` from copy ``c``, each batch with the last point of reference it read and the epochs' carry.

    The records read must be the ones the planner's index entries describe:
    the first starts at the first entry's point, and the last stable one
    reaches ``hi``. A log replaced since planning (a bridge restarted on an
    empty directory, refilled by resends at other offsets) fails this, and
    raises :class:`StaleCopy` rather than yielding a range with holes. The
    carry says whether the last row read ended its epoch (a BOUNDARY, or a
    stream without them), for the copy that may have to go on from there.
    """
    start, end = read_span(c.entries, lo, hi, c.complete_offset)
    if start >= end:
        return
    entries = tuple(e for e in c.entries if e.end_offset > start and e.first_offset < end)
    seen: int | None = None
    for batch in c.access.read(Slice(c.directory, stream, start, end, entries, 0), skip_corrupt):
        if not batch.num_rows:
            continue
        refs = batch.column("reference")
        if seen is None and not entries[0].reference_before <= refs[0].as_py() <= entries[0].reference_after:
            raise StaleCopy(f"bridge {c.copy.bridge}'s log of stream {stream} is not the one planned on")
        seen = refs[-1].as_py()
        batch, carry = with_epoch_points(batch, carry)
        holder = entries[min(bisect.bisect_left(entries, seen, key=lambda e: e.reference_after), len(entries) - 1)]
        closed = batch.column("boundary")[-1].as_py() or not holder.uses_boundaries
        yield rows_in(batch, lo, hi), seen, replace(carry, closed=closed)
    if not skip_corrupt and hi > max(lo, c.copy.start) and (seen is None or seen < hi):
        raise StaleCopy(f"bridge {c.copy.bridge}'s log of stream {stream} ends before point {hi}, which it held")


def _fresh(
    stream: int, bridges: list[tuple[str, LogAccess]], skip_corrupt: bool
) -> list[PlannedCopy]:
    """Every bridge's copy of ``stream`` as of now (bridges that cannot be reached left out)."""
    found = []
    for name, access in bridges:
        try:
            s = access.snapshots(skip_corrupt).load().get(stream)
            if s is not None and s.entries:
                found.append(PlannedCopy.of(name, access, s, complete_point(s)))
        except GONE as e:
            logger.warning(
                "aqueduct source: bridge %s cannot serve stream %d now (%s)", name, stream, e
            )
    return found


def read_piece(
    planned: PlannedPiece, skip_corrupt: bool = False, wait: float = READ_WAIT
) -> Iterator[pa.RecordBatch]:
    """The Spark rows of ``planned``'s records, in id order, each stable one once, from whichever copy serves.

    A copy that fails mid-read is left for the next from the last point it
    yielded (the rows up to it came whole from one copy). Records no copy
    holds while a copy holds later ones raise :class:`PieceLost`; no copy
    at all within ``wait`` seconds raises :class:`PieceUnavailable`.
    """
    piece = planned.piece
    point, copies, failed = piece.lo, failed_last(planned.copies), set()
    carry = EpochCarry.at(piece.lo)
    everyone = [(c.copy.bridge, c.access) for c in planned.copies] + list(planned.others)
    deadline, pause = time.monotonic() + wait, 0.1
    while point < piece.hi:
        c = next((c for c in copies if c.copy.bridge not in failed and c.copy.covers(point)), None)
        if c is None:
            copies, failed = failed_last(_fresh(piece.stream, everyone, skip_corrupt)), set()
            if any(c.copy.covers(point) for c in copies):
                continue
            _, gaps = reach([c.copy for c in copies], point)
            if gaps:
                raise PieceLost(
                    f"aqueduct source: stream {piece.stream} records after point {point} (to {gaps[0][1]}) are held by "
                    f"no bridge, while later ones are: they were lost before this query read them"
                )
            if time.monotonic() >= deadline:
                raise PieceUnavailable(
                    f"aqueduct source: no bridge holds stream {piece.stream} records ({point}, {piece.hi}] "
                    f"after {wait:.0f} s (bridges: {', '.join(n for n, _ in everyone)}); Spark retries the task"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
            continue
        end = min(piece.hi, c.copy.complete)
        try:
            for rows, last, after in _read_copy(c, piece.stream, point, end, skip_corrupt, carry):
                point, carry = max(point, min(last, end)), after
                if rows.num_rows:
                    yield rows
            point, carry = end, EpochCarry.at(end)
            _FAILED.discard(_key(c))
        except CANNOT_SERVE as e:
            _FAILED.add(_key(c))
            carry = EpochCarry.at(point) if point == end else carry.other_copy(carry.closed)
            logger.warning(
                "aqueduct source: bridge %s failed reading stream %d at point %d (%s); trying another",
                c.copy.bridge, piece.stream, point, e,
            )  # fmt: skip
            failed.add(c.copy.bridge)
