"""The failover stream reader: one stream across bridges, each ``(stream id, message id)`` once.

With ``failover=true`` (or ``bridgeList``) a stream is its stream id on
every bridge the query reads (``bridge``, ``log``, the bridge list): the
copies a producer left on the bridges it moved between are one stream.
Offsets are points of reference per stream id (:mod:`.points`); a batch
is a range of points per stream, cut into pieces each readable whole from
one copy (:mod:`.id_space`), and read by executors from whichever bridge
serves it (:mod:`.failover_read`). A commit is told to every bridge
holding the stream, as its own log offset, so each bridge acks its
producers up to what the query committed, whichever copy it read.

Bridges come and go (:mod:`.failover_bridges`, :mod:`.bridge_list`): one
whose calls fail is held for ``bridgeTimeout`` seconds (streams only it
holds wait; nothing is read from it), then left out; the bridge list file
is read again at every trigger, a bridge added is registered at the
query's points, one removed is forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from aqueduct.bridge.source.clock import REMOTE_IDLE_POLL, SYSTEM_CLOCK, Clock
from aqueduct.bridge.source.data_loss import AqueductDataLoss, corruption_is_data_loss
from aqueduct.bridge.source.failover_bridges import FailoverBridges
from aqueduct.bridge.source.failover_read import (
    PieceLost,
    PlannedPiece,
    read_piece,
)
from aqueduct.bridge.source.id_space import (
    BEFORE_ALL,
    Copy,
    Gap,
    cut,
    gap_records,
    reach,
)
from aqueduct.bridge.source.options import EARLIEST, LATEST, AqueductOptionError, SourceOptions
from aqueduct.bridge.source.planning import PARTITION_RECORDS
from aqueduct.bridge.source.points import parse_points, spark_points
from aqueduct.bridge.storage.offset import OffsetError

__all__ = ["FailoverBatchReader", "FailoverPartition", "FailoverStreamReader"]

logger = logging.getLogger(__name__)


class FailoverPartition(InputPartition):
    """Pieces of streams (:class:`~aqueduct.bridge.source.failover_read.PlannedPiece`), read in order."""

    def __init__(self, pieces: tuple[PlannedPiece, ...]) -> None:
        super().__init__(
            tuple((p.piece.stream, p.piece.lo, p.piece.hi, p.piece.candidates) for p in pieces)
        )
        self.pieces = pieces


class FailoverStreamReader(DataSourceStreamReader):
    """Micro-batches over every bridge's copies of each stream, in points of reference (module docstring)."""

    def __init__(self, options: SourceOptions, clock: Clock = SYSTEM_CLOCK) -> None:
        self.options = options
        self.bridges = FailoverBridges(options, clock)
        self._reset()

    def _reset(self) -> None:
        """Where the query is, as far as this process saw (not pickled to executors)."""
        self._committed: dict[int, int] | None = None
        self._start: dict[int, int] | None = None
        self._start_ran = False
        #: per stream, where the gaps already skipped end (failOnDataLoss=false): latestOffset and then
        #: partitions meet the same gap, which is skipped (warned, counted) once
        self._skipped_to: dict[int, int] = {}

    def __getstate__(self) -> dict:
        return {"options": self.options, "bridges": self.bridges}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    def _parse(self, offset: Mapping[str, object]) -> dict[int, int]:
        try:
            return parse_points(offset)
        except OffsetError as e:
            raise AqueductOptionError(str(e)) from None

    def starting_points(self, usable: Mapping[int, list[Copy]]) -> dict[int, int]:
        """``startingOffsets`` as points: ``earliest`` the first point any copy holds, ``latest`` the furthest end."""
        wanted = self.options.starting_offsets
        per_stream = wanted if isinstance(wanted, Mapping) else {}
        default = LATEST if wanted == "latest" else EARLIEST
        points: dict[int, int] = {}
        for sid in sorted(set(usable) | {int(k) for k in per_stream}):  # type: ignore[arg-type]
            copies = usable.get(sid, [])
            want = per_stream.get(sid, default)
            if want == EARLIEST:
                points[sid] = min((c.start for c in copies), default=BEFORE_ALL)
            elif want == LATEST:
                points[sid] = max((c.complete for c in copies), default=BEFORE_ALL)
            else:
                points[sid] = want
        return points

    def initialOffset(self) -> dict:
        """Where ``startingOffsets`` says, in points; the consumer is registered on every bridge."""
        usable, _ = self.bridges.refresh(None)
        points = self.starting_points(usable)
        at = None if self.options.starting_offsets == "earliest" else points
        self.bridges.calls.each(sorted(self.bridges.answered), lambda name: self.bridges.register(name, at))
        self._committed = dict(points)
        self._start = dict(points)
        return spark_points(points)

    def latestOffset(self) -> dict:
        """Every stream as far as its copies reach from where the next batch starts (all complete epochs).

        With ``idleWait``, a trigger that finds nothing new asks the bridges
        again every :data:`~.clock.REMOTE_IDLE_POLL` seconds, up to that
        long, and answers as soon as a copy reaches further. Producers that
        wait for their ACKs send more only once the commit this call made
        reached them: without the wait, the batch that reads what they send
        next would start a whole trigger later.
        """
        ends, moved = self._reach()
        wait, clock = self.options.idle_wait, self.bridges.clock
        deadline = clock.monotonic() + wait
        while not moved and (left := deadline - clock.monotonic()) > 0:
            clock.sleep(min(REMOTE_IDLE_POLL, left))
            ends, moved = self._reach()
        return spark_points(ends)

    def _reach(self) -> tuple[dict[int, int], bool]:
        """Refresh, record the batch that ran (see :meth:`_commit`), and every stream's end; whether any moved."""
        usable, held = self.bridges.refresh(self._committed)
        if self._start is not None and self._start_ran and self._start != self._committed:
            self._commit(self._start)  # Spark plans the next batch once the last one is committed
        elif self._committed is not None:
            self._commit(self._committed)  # bridges whose copies changed since are told too
        start = self._start or {}
        ends = dict(start)
        for sid, copies in usable.items():
            lo = start.get(
                sid, BEFORE_ALL if self._start is not None else min(c.start for c in copies)
            )
            end, gaps = reach(copies, lo, held.get(sid, ()))
            for a, b in gaps:
                self._lost(sid, a, b, copies)
            if end > lo or sid in start:
                ends[sid] = max(end, lo)
        return ends, ends != start

    def _lost(self, sid: int, a: int, b: int, copies: Iterable[Copy]) -> None:
        """Records ``(a, b]`` of stream ``sid`` no bridge holds any more: data loss, or skipped if allowed.

        A skip is warned about once and counted (at most one record per
        message id of the gap, :func:`~.id_space.gap_records`) in the
        ``skipped_records`` of the bridge whose copy goes on after it, as
        the per-log reader counts a truncation in its log's.
        """
        where = f"stream {sid} records with points of reference ({a}, {b}]"
        if self.options.fail_on_data_loss:
            raise AqueductDataLoss(
                f"aqueduct source: {where} are held by no bridge (truncated or lost with a bridge before this "
                "query read them; failOnDataLoss=false skips them instead)"
            )
        a = max(a, self._skipped_to.get(sid, BEFORE_ALL))
        if b <= a:
            return  # skipped already
        logger.warning("aqueduct source: consumer %r skips %s, held by no bridge (failOnDataLoss=false)",
                       self.options.consumer, where)  # fmt: skip
        self._skipped_to[sid] = b
        after = {c.bridge for c in copies if c.start == b}
        holder = next((n for n in self.bridges.preference() if n in after), None)
        if holder is not None:
            self.bridges.note_skipped(holder, gap_records(a, b))

    def partitions(self, start: dict, end: dict) -> list[FailoverPartition]:
        """Each stream's ``(start, end]`` cut into pieces from the copies as they are now, packed by volume.

        A bridge that is held (failing, not yet left out) is a candidate only
        where no answering bridge's copy is: a batch planned before it failed
        waits for it (or for the producer's resend elsewhere) rather than
        being called lost.
        """
        self._start, self._start_ran = self._parse(end), end != start
        starts, ends = self._parse(start), self._parse(end)
        if not self.bridges.streams:
            self.bridges.refresh(self._committed)
        copies = self.bridges.planned_copies(starts, ends)
        order = self.bridges.preference()  # a held bridge only where no other holds a copy
        pieces: list[PlannedPiece] = []
        for sid in sorted(ends):
            lo, hi = starts.get(sid, BEFORE_ALL), ends[sid]
            by_name = {c.copy.bridge: c for c in copies.get(sid, [])}
            held_now = [c.copy for c in by_name.values()]
            for item in cut(sid, lo, hi, held_now, order):
                if isinstance(item, Gap):
                    self._lost(sid, item.lo, item.hi, held_now)
                    continue
                planned = tuple(by_name[n].for_range(item.lo, item.hi) for n in item.candidates)
                others = tuple(
                    (n, a) for n, a in self.bridges.logs.items() if n not in item.candidates
                )
                pieces.append(PlannedPiece(item, planned, others))
        return self._pack(pieces)

    def _pack(self, pieces: list[PlannedPiece]) -> list[FailoverPartition]:
        """Consecutive pieces up to :data:`PARTITION_RECORDS` each (fewer with ``minPartitions``)."""
        sizes = [p.records() for p in pieces]
        target = PARTITION_RECORDS
        if self.options.min_partitions is not None:
            target = max(1, min(target, sum(sizes) // self.options.min_partitions))
        parts: list[FailoverPartition] = []
        current: list[PlannedPiece] = []
        records = 0
        for piece, size in zip(pieces, sizes, strict=True):
            if current and records + size > target:
                parts.append(FailoverPartition(tuple(current)))
                current, records = [], 0
            current.append(piece)
            records += size
        if current:
            parts.append(FailoverPartition(tuple(current)))
        return parts

    def read(self, partition: FailoverPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        skip = not self.options.fail_on_data_loss
        for planned in partition.pieces:
            try:
                with corruption_is_data_loss():
                    yield from read_piece(
                        planned, skip, wait=max(60.0, 3 * self.options.bridge_timeout)
                    )
            except PieceLost as e:
                if not skip:
                    raise AqueductDataLoss(
                        f"{e} (failOnDataLoss=false skips them instead)"
                    ) from None
                logger.warning("%s; skipped (failOnDataLoss=false)", e)

    def commit(self, end: dict) -> None:
        """Tell every bridge holding each stream that the query committed it up to ``end``."""
        self._commit(self._parse(end))

    def _commit(self, points: dict[int, int]) -> None:
        if not self.bridges.streams:  # a restarted query's first call: nothing loaded yet
            self.bridges.refresh(self._committed)
        if points != self._committed:
            self._committed = dict(points)
        self.bridges.commit(self._committed)


class FailoverBatchReader(DataSourceReader):
    """``spark.read`` with failover: every stream's records between ``startingOffsets`` and ``endingOffsets`` (points), once.

    A batch read is no consumer: it registers nowhere and commits nothing.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.stream = FailoverStreamReader(options)

    def partitions(self) -> list[FailoverPartition]:  # type: ignore[override]
        usable, held = self.stream.bridges.refresh(None)
        starts = self.stream.starting_points(usable)
        wanted = self.stream.options.ending_offsets
        per_stream = wanted if isinstance(wanted, Mapping) else {}
        ends = {}
        for sid, lo in starts.items():
            end = per_stream.get(sid, LATEST)
            if end == LATEST:
                end = reach(usable.get(sid, []), lo, held.get(sid, ()))[0]
            if end < lo:
                raise AqueductOptionError(
                    f"aqueduct source: endingOffsets {end} of stream {sid} is before its startingOffsets {lo}"
                )
            ends[sid] = end
        return self.stream.partitions(spark_points(starts), spark_points(ends))

    def read(self, partition: FailoverPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return self.stream.read(partition)
