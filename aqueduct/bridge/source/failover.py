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

Bridges come and go (:mod:`.bridge_list`): one whose calls fail is held
for ``bridgeTimeout`` seconds (streams only it holds wait; nothing is read
from it), then left out; the bridge list file is read again at every
trigger, a bridge added is registered at the query's points, one removed
is forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from aqueduct.bridge.source.bridge_list import BridgeListError, Membership, read_bridge_list
from aqueduct.bridge.source.clock import SYSTEM_CLOCK, Clock
from aqueduct.bridge.source.datasource import AqueductDataLoss, _corruption_is_data_loss
from aqueduct.bridge.source.failover_read import (
    GONE,
    PieceLost,
    PlannedCopy,
    PlannedPiece,
    complete_point,
    read_piece,
)
from aqueduct.bridge.source.flight_client import (
    BridgeCredentialError,
    RemoteLog,
    RemoteSnapshots,
    open_bridges,
)
from aqueduct.bridge.source.id_space import BEFORE_ALL, Copy, Gap, commit_offset, cut, reach
from aqueduct.bridge.source.log_access import LocalLog, LogAccess, Snapshots
from aqueduct.bridge.source.options import EARLIEST, LATEST, AqueductOptionError, SourceOptions
from aqueduct.bridge.source.planning import PARTITION_RECORDS
from aqueduct.bridge.source.points import parse_points, spark_points
from aqueduct.bridge.storage.consumers import ConsumerError
from aqueduct.bridge.storage.offset import OffsetError
from aqueduct.bridge.storage.view import FORMAT_FILE, StreamIndex

__all__ = ["FailoverPartition", "FailoverStreamReader"]

logger = logging.getLogger(__name__)


class FailoverPartition(InputPartition):
    """Pieces of streams (:class:`~aqueduct.bridge.source.failover_read.PlannedPiece`), read in order."""

    def __init__(self, pieces: tuple[PlannedPiece, ...]) -> None:
        super().__init__(
            tuple((p.piece.stream, p.piece.lo, p.piece.hi, p.piece.candidates) for p in pieces)
        )
        self.pieces = pieces


def _fixed_bridges(options: SourceOptions) -> dict[str, LogAccess]:
    """The ``log`` and ``bridge`` options' logs by name (one unnamed: named by where it is)."""
    out: dict[str, LogAccess] = {(name or path): LocalLog(path) for name, path in options.logs}
    if options.bridges:
        opened = _open(options, options.bridges)
        out |= {(name or remote.address): remote for name, remote in opened.items()}
    return out


def _open(options: SourceOptions, bridges: tuple[tuple[str | None, str], ...], token: str | None = None,
          ca: str | None = None) -> dict[str | None, RemoteLog]:  # fmt: skip
    """:func:`open_bridges` with the options' credentials, calls bounded by ``bridgeTimeout``."""
    try:
        opened = open_bridges(
            bridges, token_file=token or options.bridge_token_file, token_env=options.bridge_token_env,
            ca_file=ca or options.bridge_ca,
        )  # fmt: skip
    except BridgeCredentialError as e:
        raise AqueductOptionError(f"aqueduct source: {e}") from None
    for remote in opened.values():
        remote.call_timeout = remote.reconnect_window = options.bridge_timeout
    return opened


class FailoverStreamReader(DataSourceStreamReader):
    """Micro-batches over every bridge's copies of each stream, in points of reference (module docstring)."""

    def __init__(self, options: SourceOptions, clock: Clock = SYSTEM_CLOCK) -> None:
        self.options = options
        self.clock = clock
        self.fixed = _fixed_bridges(options)
        self.bridges: dict[str, LogAccess] = dict(self.fixed)
        self._reset()

    def _reset(self) -> None:
        """The driver's caches (not pickled to executors)."""
        self._snapshots: dict[str, Snapshots] = {}
        self._streams: dict[str, dict[int, StreamIndex]] = {}  # each bridge's last snapshot
        self._answered: set[str] = set()  # bridges whose last load answered
        self._membership = Membership(self.options.bridge_timeout)
        self._registered: set[str] = set()
        self._sent: dict[str, dict[int, int]] = {}  # each bridge's last commit
        self._complete: dict[
            tuple[str, int], tuple[int, object, int]
        ] = {}  # (bridge, sid) -> (offset, entry, point)
        self._committed: dict[int, int] | None = None
        self._start: dict[int, int] | None = None
        self._start_ran = False
        self._skipped = 0  # points skipped as lost (failOnDataLoss=false)

    def __getstate__(self) -> dict:
        return {
            "options": self.options,
            "clock": self.clock,
            "fixed": self.fixed,
            "bridges": self.bridges,
        }

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    # ------------------------------------------------------------ bridges

    def _update_list(self) -> None:
        """Read the bridge list again: open the bridges added, forget the ones removed."""
        if self.options.bridge_list is None:
            return
        try:
            entries = read_bridge_list(self.options.bridge_list)
        except BridgeListError as e:
            logger.error("aqueduct source: %s; the bridges listed before stay", e)
            return
        listed = {e.name for e in entries}
        for name in [n for n in self.bridges if n not in self.fixed and n not in listed]:
            logger.info("aqueduct source: bridge %s left the bridge list; forgotten", name)
            for table in (self.bridges, self._snapshots, self._streams, self._sent):
                table.pop(name, None)
            self._answered.discard(name)
            self._registered.discard(name)
            self._membership.forget(name)
        for e in entries:
            if e.name in self.bridges:
                continue
            if e.name in self.fixed:
                raise AqueductOptionError(
                    f"aqueduct source: bridge list names {e.name!r}, also named by an option"
                )
            try:
                (remote,) = _open(
                    self.options, ((e.name, e.address),), e.token_file, e.ca_file
                ).values()
            except AqueductOptionError as err:
                logger.error("%s; bridge %s is not read until its list line is fixed", err, e.name)
                continue
            logger.info("aqueduct source: bridge %s (%s) joined the bridge list", e.name, e.address)
            self.bridges[e.name] = remote

    def _load(self, name: str) -> dict[int, StreamIndex] | None:
        """``name``'s streams as of now, None if it cannot be reached (or its log is gone)."""
        access = self.bridges[name]
        try:
            if isinstance(access, LocalLog) and not (access.path / FORMAT_FILE).is_file():
                raise FileNotFoundError(f"{access.path} is no longer a log")
            if name not in self._snapshots:
                self._snapshots[name] = access.snapshots(not self.options.fail_on_data_loss)
            snapshots = self._snapshots[name]
            before = getattr(snapshots, "failures", 0)
            streams = snapshots.load()
            if isinstance(snapshots, RemoteSnapshots) and snapshots.failures != before:
                return None
            return streams
        except GONE as e:
            logger.warning("aqueduct source: bridge %s cannot be reached (%s)", name, e)
            self._snapshots.pop(name, None)
            return None

    def _refresh(self) -> tuple[dict[int, list[PlannedCopy]], dict[int, list[Copy]]]:
        """Every stream's copies on the bridges planning reads, and those on bridges held (not read, waited for)."""
        self._update_list()
        now = self.clock.monotonic()
        self._answered = set()
        for name in self.bridges:
            streams = self._load(name)
            if streams is None:
                self._membership.failed(name, now)
                self._sent.pop(name, None)  # a commit it missed is sent again when it answers
                if self._membership.left_out(name, now):
                    self._streams.pop(name, None)
            else:
                self._membership.answered(name)
                self._streams[name] = streams
                self._answered.add(name)
        usable: dict[int, list[PlannedCopy]] = {}
        held: dict[int, list[Copy]] = {}
        reads = self.options.reads
        with _corruption_is_data_loss():
            for name, streams in self._streams.items():
                for sid, s in streams.items():
                    if not s.entries or not reads.selects(sid, s.meta.stream_name):
                        continue
                    c = PlannedCopy.of(name, self.bridges[name], s, self._complete_point(name, s))
                    if name in self._answered:
                        usable.setdefault(sid, []).append(c)
                    else:
                        held.setdefault(sid, []).append(c.copy)
        for name in self._answered - self._registered:
            if self._committed is not None:
                self._register(name, self._committed)
        return usable, held

    def _complete_point(self, name: str, s: StreamIndex) -> int:
        """:func:`complete_point`, remembered while the stream's last entry and closed epochs stay the same."""
        key = (name, s.stream_id)
        last = s.entries[-1]
        known = self._complete.get(key)
        if known is not None and known[0] == s.complete and known[1] is last:
            return known[2]
        point = complete_point(s)
        self._complete[key] = (s.complete, last, point)
        return point

    def _register(self, name: str, points: Mapping[int, int] | None) -> None:
        """Register the consumer on ``name`` at ``points`` (None: from its earliest records)."""
        positions = {} if points is None else self._positions(name, points)
        try:
            self.bridges[name].register(self.options.consumer, positions, self.options.reads)
            self._registered.add(name)
        except (*GONE, ConsumerError) as e:
            logger.warning(
                "aqueduct source: cannot register %r on bridge %s (%s); next trigger",
                self.options.consumer,
                name,
                e,
            )

    def _positions(self, name: str, points: Mapping[int, int]) -> dict[int, int]:
        """``points`` as ``name``'s log offsets, for the streams it holds (see :func:`commit_offset`)."""
        out = {}
        streams = self._streams.get(name, {})
        with _corruption_is_data_loss():
            for sid, point in points.items():
                s = streams.get(sid)
                if s is None or not s.entries:
                    continue
                offset = commit_offset(s.entries, point, s.reference_at)
                if offset is not None:
                    out[sid] = offset
        return out

    # ------------------------------------------------------------ Spark's calls

    def _parse(self, offset: Mapping[str, object]) -> dict[int, int]:
        try:
            return parse_points(offset)
        except OffsetError as e:
            raise AqueductOptionError(str(e)) from None

    def initialOffset(self) -> dict:
        """Where ``startingOffsets`` says, in points; the consumer is registered on every bridge."""
        usable, _ = self._refresh()
        wanted = self.options.starting_offsets
        per_stream = wanted if isinstance(wanted, Mapping) else {}
        default = LATEST if wanted == "latest" else EARLIEST
        points: dict[int, int] = {}
        for sid in sorted(set(usable) | {int(k) for k in per_stream}):  # type: ignore[arg-type]
            copies = [c.copy for c in usable.get(sid, [])]
            want = per_stream.get(sid, default)
            if want == EARLIEST:
                points[sid] = min((c.start for c in copies), default=BEFORE_ALL)
            elif want == LATEST:
                points[sid] = max((c.complete for c in copies), default=BEFORE_ALL)
            else:
                points[sid] = want
        for name in self._answered:
            self._register(name, None if wanted == "earliest" else points)
        self._committed = dict(points)
        self._start = dict(points)
        return spark_points(points)

    def latestOffset(self) -> dict:
        """Every stream as far as its copies reach from where the next batch starts (all complete epochs)."""
        if self._start is not None and self._start_ran and self._start != self._committed:
            self._commit(self._start)
        usable, held = self._refresh()
        start = self._start or {}
        ends = dict(start)
        for sid, planned in usable.items():
            copies = [c.copy for c in planned]
            lo = start.get(
                sid, BEFORE_ALL if self._start is not None else min(c.start for c in copies)
            )
            end, gaps = reach(copies, lo, held.get(sid, ()))
            for a, b in gaps:
                self._lost(sid, a, b)
            if end > lo or sid in start:
                ends[sid] = max(end, lo)
        return spark_points(ends)

    def _lost(self, sid: int, a: int, b: int) -> None:
        """Records ``(a, b]`` of stream ``sid`` no bridge holds any more: data loss, or skipped if allowed."""
        where = f"stream {sid} records with points of reference ({a}, {b}]"
        if self.options.fail_on_data_loss:
            raise AqueductDataLoss(
                f"aqueduct source: {where} are held by no bridge (truncated or lost with a bridge before this "
                "query read them; failOnDataLoss=false skips them instead)"
            )
        logger.warning("aqueduct source: consumer %r skips %s, held by no bridge (failOnDataLoss=false)",
                       self.options.consumer, where)  # fmt: skip
        self._skipped += 1

    def partitions(self, start: dict, end: dict) -> list[FailoverPartition]:
        """Each stream's ``(start, end]`` cut into pieces from the copies as they are now, packed by volume."""
        self._start, self._start_ran = self._parse(end), end != start
        starts, ends = self._parse(start), self._parse(end)
        if not self._streams:
            self._refresh()
        copies: dict[int, list[PlannedCopy]] = {}
        with _corruption_is_data_loss():
            for name in self._answered:
                for sid, s in self._streams.get(name, {}).items():
                    if sid in ends and s.entries:
                        c = PlannedCopy.of(
                            name, self.bridges[name], s, self._complete_point(name, s)
                        )
                        copies.setdefault(sid, []).append(c)
        order = list(self.bridges)
        pieces: list[PlannedPiece] = []
        for sid in sorted(ends):
            lo, hi = starts.get(sid, BEFORE_ALL), ends[sid]
            by_name = {c.copy.bridge: c for c in copies.get(sid, [])}
            for item in cut(sid, lo, hi, [c.copy for c in by_name.values()], order):
                if isinstance(item, Gap):
                    self._lost(sid, item.lo, item.hi)
                    continue
                planned = tuple(by_name[n] for n in item.candidates)
                others = tuple((n, a) for n, a in self.bridges.items() if n not in item.candidates)
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
                with _corruption_is_data_loss():
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
        if not self._streams:  # a restarted query's first call: nothing loaded yet
            self._refresh()
        self._committed = dict(points)
        for name in sorted(self._answered):
            positions = self._positions(name, points)
            if not positions or positions == self._sent.get(name):
                continue
            try:
                self.bridges[name].commit(self.options.consumer, positions, 0)
                self._sent[name] = positions
            except (*GONE, ConsumerError) as e:
                logger.warning(
                    "aqueduct source: commit to bridge %s failed (%s); the next one covers it",
                    name,
                    e,
                )
