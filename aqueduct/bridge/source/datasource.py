"""The Spark Structured Streaming source ``aqueduct``: reads the durable log.

Usage::

    from aqueduct.bridge.source import register
    register(spark)
    df = spark.readStream.format("aqueduct").option("log", "/path/to/log").load()

Offsets are per stream, like the Kafka source's per-partition offsets:
``{"<stream id>": position}`` with keys sorted numerically, because Spark
compares offsets as JSON text. A position is a log offset (record count,
BOUNDARY markers included) and always the end of a closed epoch, so a
micro-batch never holds part of an epoch.

Process model (pyspark 4.3): the ``DataSource`` and the stream reader are
pickled into a Python worker that the driver JVM spawns for planning
(``initialOffset``, ``latestOffset``, ``partitions``, ``commit``), and the
reader again into executor workers for :meth:`AqueductStreamReader.read`.
So nothing here opens a file or socket before it is used, and every
method re-reads the log's index (the only thing a reader trusts).

Where the log is (``log``: its directory; ``bridge``: a bridge's Flight
server, for executors that cannot see the bridge's disk) is one
:class:`~aqueduct.bridge.source.log_access.LogAccess` per log; the planning here
is the same for both.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aqueduct.bridge.source.admission import Limit, admit
from aqueduct.bridge.source.clock import REMOTE_IDLE_POLL, SYSTEM_CLOCK, Clock
from aqueduct.bridge.source.data_loss import AqueductDataLoss, corruption_is_data_loss
from aqueduct.bridge.source.flight_client import (
    BridgeCredentialError,
    open_bridges,
)
from aqueduct.bridge.source.lag import stored_bytes
from aqueduct.bridge.source.log_access import LocalLog, LogAccess, Snapshots
from aqueduct.bridge.source.options import (
    EARLIEST,
    LATEST,
    AqueductOptionError,
    SourceOptions,
)
from aqueduct.bridge.source.planning import Slice, plan_slices
from aqueduct.bridge.storage.changes import CHANGES_FILE
from aqueduct.bridge.storage.consumers import (
    ALL_STREAMS,
    ConsumerError,
)
from aqueduct.bridge.storage.offset import SourceOffset, StreamKey, key_text
from aqueduct.bridge.storage.schema import SPARK_COLUMNS, SPARK_FIELDS
from aqueduct.bridge.storage.view import StreamIndex

__all__ = [
    "SPARK_STRUCT", "AqueductBatchReader", "AqueductDataLoss", "AqueductDataSource", "AqueductLimitedStreamReader", "AqueductOptionError",
    "AqueductPartition", "AqueductStreamReader", "SourceOptions", "register", "stream_reader",
]  # fmt: skip

logger = logging.getLogger(__name__)

_SPARK_TYPES = {
    pa.int64(): LongType(),
    pa.string(): StringType(),
    pa.timestamp("us", tz="UTC"): TimestampType(),
    pa.binary(): BinaryType(),
}

#: The rows' Spark schema, derived from the Arrow one so the two cannot drift.
SPARK_STRUCT = StructType(
    [StructField(f.name, _SPARK_TYPES[f.type], f.nullable) for f in SPARK_FIELDS]
)

#: Options that shape micro-batches, meaningless for a batch read.
STREAMING_ONLY = ("consumer", "failOnDataLoss", "maxRecordsPerTrigger", "maxBytesPerTrigger",
                  "minRecordsPerTrigger", "maxTriggerDelay", "idleWait")  # fmt: skip

#: Seconds between looks at the change journal while ``idleWait`` waits for new data.
IDLE_POLL = 0.005


def _start_of(s: StreamIndex, wanted: int, option: str = "startingOffsets") -> int:
    """Where a stream starts (or, for ``endingOffsets``, ends) for entry ``wanted``: an epoch boundary."""
    if wanted == EARLIEST:
        return s.earliest
    if wanted == LATEST:
        return s.complete
    if wanted < s.earliest:
        raise AqueductDataLoss(
            f"aqueduct source: {option} asks for stream {s.stream_id} at {wanted}, "
            f"but the log keeps it only from {s.earliest}"
        )
    if wanted > s.complete:
        raise AqueductOptionError(
            f"aqueduct source: {option} asks for stream {s.stream_id} at {wanted}, "
            f"beyond the end of its last complete epoch ({s.complete})"
        )
    if wanted < s.complete and s.first_offset_of_epoch_at_least(s.epoch_at(wanted)) != wanted:
        raise AqueductOptionError(
            f"aqueduct source: {option} asks for stream {s.stream_id} at {wanted}, inside "
            "an epoch; a query starts at an epoch boundary so it never sees part of one"
        )
    return wanted


def _positions(
    option: str, wanted: str | Mapping[StreamKey, int], streams: Mapping[StreamKey, StreamIndex]
) -> dict[StreamKey, int]:
    """Per stream, where ``startingOffsets``/``endingOffsets`` (``wanted``) puts a read."""
    default = LATEST if wanted == "latest" else EARLIEST
    per_stream = wanted if isinstance(wanted, Mapping) else {}
    unknown = sorted(set(per_stream) - set(streams))
    if unknown:
        raise AqueductOptionError(
            f"aqueduct source: {option} names streams the log does not have "
            f"(or the stream filter leaves out): [{', '.join(key_text(k) for k in unknown)}]"
        )
    with corruption_is_data_loss():
        return {k: _start_of(s, per_stream.get(k, default), option) for k, s in streams.items()}


class AqueductDataSource(DataSource):
    """Spark data source ``aqueduct``: every record of a durable log, exactly once."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = SourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return "aqueduct"

    def schema(self) -> StructType:
        """The rows' columns; reading several logs adds ``log``, the name of each row's log (not with failover)."""
        if self.parsed.qualified:
            return StructType([*SPARK_STRUCT.fields, StructField("log", StringType(), False)])
        return SPARK_STRUCT

    def streamReader(self, schema: StructType) -> AqueductStreamReader:
        """The plain reader, or with a per-trigger limit option the one Spark drives with admission control.

        Spark asks a reader whose ``latestOffset`` takes a start and a limit
        (admission control) two planner round trips per trigger,
        ``latestOffset`` and then ``reportLatestOffset``; the plain reader's
        ``latestOffset()`` takes no arguments, so Spark asks it once.
        """
        if "endingoffsets" in self.parsed.given:
            raise AqueductOptionError(
                "aqueduct source: endingOffsets is for batch reads (spark.read); a streaming "
                "query reads on as records arrive"
            )
        if self.parsed.failover:  # one stream across bridges: its own reader (docs/source.md "Failover")
            from aqueduct.bridge.source.failover import FailoverStreamReader

            return FailoverStreamReader(self.parsed)  # type: ignore[return-value]
        return stream_reader(self.parsed)

    def reader(self, schema: StructType) -> AqueductBatchReader:
        given = sorted(name for name in STREAMING_ONLY if name.lower() in self.parsed.given)
        if given:
            raise AqueductOptionError(
                f"aqueduct source: {', '.join(given)} only apply to streaming queries "
                "(spark.readStream); a batch read is no consumer and has no triggers"
            )
        if self.parsed.failover:
            from aqueduct.bridge.source.failover import FailoverBatchReader

            return FailoverBatchReader(self.parsed)  # type: ignore[return-value]
        return AqueductBatchReader(self.parsed)


class AqueductPartition(InputPartition):
    """Records of one or more streams (:class:`~aqueduct.bridge.source.planning.Slice`), read in order.

    Carrying the index entries makes :func:`read_partition` independent of
    later index changes: the same partition always yields the same rows.
    """

    def __init__(self, slices: tuple[Slice, ...]) -> None:
        super().__init__(tuple((key_text(x.key), x.start, x.end) for x in slices))
        self.slices = slices


def read_partition(
    partition: AqueductPartition, logs: Mapping[str | None, LogAccess], skip_corrupt: bool = False
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the partition's records, BOUNDARY markers left out.

    A slice of a query over several logs gets the ``log`` column (its log's name).
    A stored batch failing its checksum is data loss, named with its log,
    stream and records; ``skip_corrupt`` (``failOnDataLoss=false``) skips it
    with a warning instead. Either way the log's ``corrupt/`` register
    records it (see :class:`~aqueduct.bridge.source.log_access.LogAccess`).
    """
    # Imported where it is used: every new query spawns a fresh planner Python process
    # that imports this module, and pyarrow.compute was a third of that import (about
    # 0.1 s on the benchmark machine) on the way to the query's first micro-batch.
    import pyarrow.compute as pc

    with corruption_is_data_loss():
        for x in partition.slices:
            log = logs[x.key[0] if isinstance(x.key, tuple) else None]
            for batch in log.read(x, skip_corrupt):
                rows = batch.filter(pc.invert(batch.column("boundary"))).select(list(SPARK_COLUMNS))
                if not rows.num_rows:
                    continue
                if isinstance(x.key, tuple):
                    name = pa.repeat(pa.scalar(x.key[0], pa.string()), rows.num_rows)
                    rows = pa.RecordBatch.from_arrays(
                        [*rows.columns, name], schema=rows.schema.append(pa.field("log", pa.string(), False))
                    )
                yield rows


def _check_not_truncated(streams: Mapping[StreamKey, StreamIndex], starts: Mapping[StreamKey, int]) -> None:
    """Refuse to go on silently when records this query still needs are gone."""
    for k, s in streams.items():
        pos = starts.get(k, 0)
        if pos < s.earliest:
            raise AqueductDataLoss(
                f"aqueduct source: stream {key_text(k)} records [{pos}, {s.earliest}) were truncated "
                "from the log before this query read them (the log keeps records only for "
                "registered consumers: give each query its own 'consumer' name, see "
                "`aqueduct-bridge consumers list`; failOnDataLoss=false skips them instead)"
            )


def _offsets(positions: Mapping[StreamKey, int]) -> dict[str, int]:
    """Spark offset dict: keys in (log, stream id) order, so the JSON text is canonical."""
    return SourceOffset(positions).spark()


class _LogReader:
    """What the batch and the stream reader share: the logs' streams and their partitions.

    Streams are keyed by :data:`~aqueduct.bridge.source.options.StreamKey`:
    their id when the query reads one log, ``(log name, id)`` when it reads
    several, so ids of different bridges never collide.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        #: each log by name (None when one): this runs on the driver, so a bridge's
        #: credential is read here and reaches executors inside the pickled reader
        self.logs: dict[str | None, LogAccess] = {name: LocalLog(path) for name, path in options.logs}
        if options.bridges:
            try:
                self.logs |= open_bridges(
                    options.bridges, token_file=options.bridge_token_file,
                    token_env=options.bridge_token_env, ca_file=options.bridge_ca, consumer=options.consumer,
                )  # fmt: skip
            except BridgeCredentialError as e:
                raise AqueductOptionError(f"aqueduct source: {e}") from None
        self._snapshots: list[tuple[str | None, Snapshots]] | None = None
        self._selected: tuple[tuple[int, ...], dict[StreamKey, StreamIndex]] | None = None
        #: the last two offsets handed to Spark (its next start, and the start of the batch it plans)
        self._returned: list[tuple[dict[str, int], dict[StreamKey, int]]] = []
        #: streams reloaded since latestOffset last looked; None after a full rescan
        self._dirty: set[StreamKey] | None = None

    def __getstate__(self) -> dict:
        # Spark pickles readers into its workers: the snapshot caches stay behind.
        cache = {"_snapshots": None, "_selected": None, "_returned": [], "_dirty": None}
        return {k: v for k, v in self.__dict__.items() if k not in cache} | cache

    def _streams(self) -> dict[StreamKey, StreamIndex]:
        """The streams this read selects (``streams``/``streamPattern``), as of now.

        The same dict as last time when no log changed: planning a trigger
        over thousands of quiet streams costs no work per stream here.
        """
        if self._snapshots is None:
            skip = not self.options.fail_on_data_loss
            self._snapshots = [(name, log.snapshots(skip)) for name, log in self.logs.items()]
        loaded = [(name, snapshots.load()) for name, snapshots in self._snapshots]
        self._note_changes()
        identity = tuple(id(streams) for _, streams in loaded)
        if self._selected is not None and self._selected[0] == identity:
            return self._selected[1]
        reads, selected = self.options.reads, {}
        if len(loaded) == 1 and loaded[0][0] is None and reads == ALL_STREAMS:
            selected = loaded[0][1]  # one log, every stream: nothing to select
            self._selected = (identity, selected)
            return selected
        for name, streams in loaded:
            for sid, s in streams.items():
                if reads.selects(sid, s.meta.stream_name):
                    selected[sid if name is None else (name, sid)] = s
        self._selected = (identity, selected)
        return selected

    def _note_changes(self) -> None:
        """Add the streams the snapshots just reloaded to the dirty set (None: all may have changed)."""
        assert self._snapshots is not None
        for name, snapshots in self._snapshots:
            if snapshots.changed is None:
                self._dirty = None
            elif self._dirty is not None:
                self._dirty.update(snapshots.changed if name is None else ((name, sid) for sid in snapshots.changed))

    def _take_dirty(self) -> set[StreamKey] | None:
        dirty, self._dirty = self._dirty, set()
        return dirty

    def _parse(self, offsets: dict[str, int]) -> dict[StreamKey, int]:
        """Spark's offset dict back to positions per stream key (:meth:`SourceOffset.parse`).

        Spark hands back, as the next start, the very offsets this reader
        returned before: those are recognised (one C-level comparison) and
        not parsed again, key by key, at every trigger.
        """
        for text, positions in self._returned:
            if offsets == text:
                return dict(positions)
        return dict(SourceOffset.parse(offsets, qualified=self.options.qualified).positions)

    def _per_log(self, positions: Mapping[StreamKey, int]) -> dict[str | None, dict[int, int]]:
        """Positions split by log name, with plain stream ids (what each log holds)."""
        split: dict[str | None, dict[int, int]] = {name: {} for name in self.logs}
        for k, pos in positions.items():
            name, sid = k if isinstance(k, tuple) else (None, k)
            split[name][sid] = pos
        return split

    def _plan(
        self,
        streams: Mapping[StreamKey, StreamIndex],
        starts: Mapping[StreamKey, int],
        ends: Mapping[StreamKey, int],
    ) -> list[AqueductPartition]:
        slices = plan_slices(streams, starts, ends, min_partitions=self.options.min_partitions)
        return [AqueductPartition(group) for group in slices]


class AqueductBatchReader(_LogReader, DataSourceReader):
    """``spark.read.format("aqueduct")``: complete epochs between startingOffsets and endingOffsets."""

    def partitions(self) -> list[AqueductPartition]:  # type: ignore[override]
        streams = self._streams()
        starts = _positions("startingOffsets", self.options.starting_offsets, streams)
        ends = _positions("endingOffsets", self.options.ending_offsets, streams)
        for k, end in ends.items():
            if end < starts[k]:
                raise AqueductOptionError(
                    f"aqueduct source: endingOffsets {end} of stream {key_text(k)} is before its "
                    f"startingOffsets {starts[k]}"
                )
        return self._plan(streams, starts, ends)

    def read(self, partition: AqueductPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_partition(partition, self.logs)


class AqueductStreamReader(_LogReader, DataSourceStreamReader):
    """Micro-batch reader over memory-mapped Arrow segments, without admission control.

    What a query without ``maxRecordsPerTrigger``, ``maxBytesPerTrigger``
    or ``minRecordsPerTrigger`` gets: its ``latestOffset()`` takes no
    arguments, so Spark (pyspark 4.3's ``PythonMicroBatchStream``) asks it
    once per trigger, where a reader with admission control is asked
    ``latestOffset`` and then ``reportLatestOffset``, each a round trip to
    the planner's Python worker. Spark does not hand this reader the
    batch's start, so it tracks it: the end of the last batch Spark planned
    (:meth:`partitions`), or where the query started. ``Trigger.AvailableNow``
    then runs through Spark's own wrapper, which asks ``latestOffset()``
    once and reads up to that end.

    ``clock`` is what ``idleWait`` and ``maxTriggerDelay`` read and sleep
    by (:mod:`aqueduct.bridge.source.clock`): the real one, unless a test
    drives time itself.
    """

    def __init__(self, options: SourceOptions, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(options)
        self.clock = clock
        self._target: dict[StreamKey, int] | None = None
        self._turn = 0
        self._last_batch_at = clock.monotonic()  # for maxTriggerDelay
        self._skipped: dict[StreamKey, tuple[int, int]] = {}  # failOnDataLoss=false: the range skipped
        #: per stream, where the ranges already counted as skipped end (a batch's range is seen
        #: by latestOffset and again by partitions, around a commit)
        self._skipped_to: dict[StreamKey, int] = {}
        self._previous_unlimited = False  # the last offsets returned were taken without any limit
        #: the offsets last recorded as committed (or the query's start): see :meth:`next_end`
        self._committed: dict[str, int] | None = None
        #: where the next batch starts, as far as this reader saw (None: not known yet), and
        #: whether a batch ending there ran (Spark then asks for the next end only once it committed)
        self._start: dict[str, int] | None = None
        self._start_ran = False

    def initialOffset(self) -> dict[str, int]:
        """Where ``startingOffsets`` says (default: the earliest records still stored).

        Spark asks only when a query starts without a checkpoint, so this is
        also where its consumer joins each log's registry (or, dropped
        before, joins anew). From the earliest record, it registers first
        and reads the log after, so truncation cannot pass the start this
        returns except in the moment before the bridge re-reads the
        registry, which the data-loss check then reports.
        """
        o = self.options
        if o.starting_offsets == "earliest":
            for log in self.logs.values():
                log.register(o.consumer, {}, o.reads)
        start = _positions("startingOffsets", o.starting_offsets, self._streams())
        if o.starting_offsets != "earliest":
            for name, positions in self._per_log(start).items():
                self.logs[name].register(o.consumer, positions, o.reads)
        self._committed = _offsets(start)  # where it starts is no commit
        self._start = dict(self._committed)
        return dict(self._committed)

    def latestOffset(self) -> dict[str, int]:  # type: ignore[override]
        """End of the next micro-batch: every stream's complete epochs (see :meth:`next_end`).

        Its start is the end of the batch Spark last planned. A batch only
        seen as Spark's latest offset on restart (``partitions`` of an empty
        range: it may not have run yet) or not seen at all is no commit to
        record; with no start known, the end is every stream's complete
        epochs, answered at once.
        """
        if self._start is None:
            streams = self._streams()
            self._take_dirty()
            return self._out({k: s.complete for k, s in streams.items()})
        return self.next_end(self._start, ReadAllAvailable(), record_commit=self._start_ran)

    def _starts(self, start: dict[str, int], streams: Mapping[StreamKey, StreamIndex]) -> dict[StreamKey, int]:
        """The previous batch's ends, checked against truncation in ``streams``."""
        starts = self._parse(start)
        self._losses(starts, streams)
        return starts

    def _losses(self, starts: dict[StreamKey, int], streams: Mapping[StreamKey, StreamIndex]) -> None:
        """What truncation took from ``starts`` is data loss, or skipped (moved past) if allowed."""
        if self.options.fail_on_data_loss:
            _check_not_truncated(streams, starts)
            return
        for k, s in streams.items():
            pos = starts.get(k, 0)
            if pos < s.earliest:
                logger.warning(
                    "aqueduct source: consumer %r skips stream %s records [%d, %d), truncated "
                    "before it read them (failOnDataLoss=false)", self.options.consumer, key_text(k), pos, s.earliest,
                )  # fmt: skip
                if self._skipped_to.get(k, 0) < s.earliest:
                    self._skipped[k] = (max(pos, self._skipped_to.get(k, 0)), s.earliest)
                    self._skipped_to[k] = s.earliest
                starts[k] = s.earliest

    def next_end(self, start: dict[str, int], limit: ReadLimit, record_commit: bool = True) -> dict[str, int]:
        """End of the next micro-batch from ``start``: whole epochs, within the limits (see admission).

        Caught up and without limits (the common trigger), only the streams
        the log changed since the last call are looked at: the rest keep
        the positions this reader returned last time.

        With ``idleWait``, a trigger that finds nothing new waits up to that
        long for the writer's change journal to move, and answers as soon as
        it does: under a trigger that runs back to back, a batch starts the
        moment data is durable, and an idle query plans a few times a
        second instead of a hundred.

        Spark asks for the next end only once the batch ending at ``start``
        is committed in the sink (and its commit log), so that commit is
        recorded here (unless ``record_commit`` is false: ``start`` is not
        known to be a batch that ran), a trigger after it, rather than by
        :meth:`commit`, which Spark calls only when it plans the batch
        after (never, while no record arrives): a query in another
        application, which no bridge's listener watches, has its producers
        acked as promptly.
        """
        if record_commit and start != self._committed:
            self.commit(start)
        end = self._latest(start, limit)
        wait = self.options.idle_wait
        if wait <= 0 or end != start or self._target is not None:
            return end
        deadline = self.clock.monotonic() + wait
        while self._journals_moved(deadline):
            end = self._latest(start, limit)
            if end != start:
                break
        return end

    def _journals_moved(self, deadline: float) -> bool:
        """Wait until a log may have changed (True) or ``deadline`` passed (False).

        A log directory's change journal is watched (a ``stat`` per
        :data:`IDLE_POLL`); a bridge's log is asked again every
        :data:`REMOTE_IDLE_POLL` (one Flight call, answered with only what changed).
        """
        def keys() -> list[tuple[int, int] | None]:
            out = []
            for _, path in self.options.logs:
                try:
                    st = os.stat(Path(path) / CHANGES_FILE)
                    out.append((st.st_ino, st.st_size))
                except FileNotFoundError:
                    out.append(None)
            return out

        before = keys()
        clock = self.clock
        ask_bridges = clock.monotonic() + REMOTE_IDLE_POLL if self.options.bridges else None
        while (left := deadline - clock.monotonic()) > 0:
            clock.sleep(min(IDLE_POLL, left))
            if keys() != before or (ask_bridges is not None and clock.monotonic() >= ask_bridges):
                return True
        return False

    def _latest(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        streams = self._streams()  # first: a bridge answers whether it dropped the consumer with them
        try:
            for log in self.logs.values():
                log.check_not_dropped(self.options.consumer)
        except ConsumerError as e:
            raise AqueductDataLoss(f"aqueduct source: {e}") from None
        dirty = self._take_dirty()
        max_records, limits = self._budget(limit, streams)
        previous = self._returned[-1] if self._returned else None
        unlimited = max_records is None and not limits and self._target is None
        if (
            dirty is not None and previous is not None and start == previous[0]
            and unlimited and self._previous_unlimited
        ):  # fmt: skip
            starts = dict(previous[1])
            self._losses(starts, {k: streams[k] for k in dirty if k in streams})
            ends = dict(starts)
            for k in dirty:
                if k in streams and (streams[k].complete > 0 or k in starts):
                    ends[k] = max(starts.get(k, 0), streams[k].complete)
        else:
            starts = self._starts(start, streams)
            completes = {k: s.complete for k, s in streams.items()}
            if self._target is not None:
                completes = {k: min(c, self._target.get(k, 0)) for k, c in completes.items()}
            for k, pos in starts.items():
                completes[k] = max(completes.get(k, pos), pos)
            completes = {k: c for k, c in completes.items() if c > 0 or k in starts}
            self._turn += 1
            with corruption_is_data_loss():  # a budget asks epoch questions
                ends = admit(starts, completes, streams, max_records, self._turn, limits=limits)
        if self._too_few(starts, ends):
            # No batch yet: what changed must be looked at again next time.
            self._dirty = None if dirty is None or self._dirty is None else self._dirty | dirty
            return _offsets(self._parse(start))
        if ends != starts:
            self._last_batch_at = self.clock.monotonic()
        self._previous_unlimited = unlimited  # its ends were every stream's complete end
        return self._out(ends)

    def _out(self, ends: dict[StreamKey, int]) -> dict[str, int]:
        """``_offsets(ends)``, remembered; built from the previous one when only positions moved."""
        prev = self._returned[-1] if self._returned else None
        if prev is not None and prev[1].keys() == ends.keys():
            out = dict(prev[0])  # same keys: same canonical order
            for k, v in ends.items():
                if prev[1][k] != v:
                    out[key_text(k)] = v
        else:
            out = _offsets(ends)
        self._returned = [*self._returned[-1:], (out, dict(ends))]
        return out

    def _budget(
        self, limit: ReadLimit, streams: Mapping[StreamKey, StreamIndex]
    ) -> tuple[int | None, list[Limit]]:
        """The record budget Spark passes, and the byte budget (from Spark or the option)."""
        max_bytes = self.options.max_bytes_per_trigger
        if isinstance(limit, ReadMaxRows):
            max_records: int | None = limit.max_rows
        elif isinstance(limit, ReadMaxBytes):
            max_records, max_bytes = None, limit.max_bytes
        elif isinstance(limit, ReadAllAvailable):
            max_records = None
        else:
            raise ValueError(f"aqueduct source: unsupported read limit {limit!r}")
        if max_bytes is None:
            return max_records, []
        sizes = {k: stored_bytes(s) for k, s in streams.items()}
        return max_records, [Limit(max_bytes, sizes.__getitem__)]

    def _too_few(self, starts: Mapping[StreamKey, int], ends: Mapping[StreamKey, int]) -> bool:
        """``minRecordsPerTrigger``: wait for more, unless ``maxTriggerDelay`` passed (or AvailableNow)."""
        wanted = self.options.min_records_per_trigger
        if wanted is None or self._target is not None:
            return False
        available = sum(ends[k] - starts.get(k, 0) for k in ends)
        waited = self.clock.monotonic() - self._last_batch_at
        return available < wanted and waited < self.options.max_trigger_delay

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[AqueductPartition]:
        """Stream ranges packed and split by volume (see :mod:`aqueduct.bridge.source.planning`).

        ``end`` is where the next batch starts. Spark asks the partitions of
        an empty range on restart to tell the reader its latest offset
        (``setLatestSeenOffset``): a batch that may not have run yet.
        """
        self._start, self._start_ran = dict(end), end != start
        ends = self._parse(end)
        starts = self._parse(start)
        moved = {k: stop for k, stop in ends.items() if stop > starts.get(k, 0)}
        streams = self._covering(moved)
        self._losses(starts, {k: streams[k] for k in moved if k in streams})
        return self._plan(streams, starts, moved)

    def _covering(self, ends: Mapping[StreamKey, int]) -> Mapping[StreamKey, StreamIndex]:
        """The streams as :meth:`latestOffset` last saw them, if they hold every record below ``ends``.

        Spark plans the partitions of the batch whose end latestOffset has
        just returned; meanwhile more group commits changed the indexes, and
        reloading one decodes the whole index file (20 ms per 1,500 entries
        on the benchmark machine). The snapshot that gave ``ends`` holds them.
        Otherwise (a restart re-planning a batch) they are loaded now.
        """
        if self._selected is not None:
            cached = self._selected[1]
            if all(k in cached and cached[k].complete >= end for k, end in ends.items()):
                return cached
        return self._streams()

    def read(self, partition: AqueductPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_partition(partition, self.logs, skip_corrupt=not self.options.fail_on_data_loss)

    def commit(self, end: dict[str, int]) -> None:
        """Record Spark's committed offsets with each log (the safety-net signal).

        Each log gets its own streams' positions under plain stream ids, so
        its bridge reads them as it reads any consumer's, with the records
        ``failOnDataLoss=false`` skipped since the last commit.

        Spark calls this with the previous batch's end while it writes the
        next batch's offsets, after :meth:`latestOffset` recorded that very
        end: the same positions are not written (two fsyncs) again.
        """
        if end == self._committed and not self._skipped:
            return
        skipped = self._per_log({k: b - a for k, (a, b) in self._skipped.items()})
        self._skipped.clear()
        self._committed = end
        for name, positions in self._per_log(self._parse(end)).items():
            self.logs[name].commit(self.options.consumer, positions, sum(skipped[name].values()))


class AqueductLimitedStreamReader(AqueductStreamReader, SupportsTriggerAvailableNow):
    """The reader with admission control: ``maxRecordsPerTrigger``, ``maxBytesPerTrigger``, ``minRecordsPerTrigger``.

    Its ``latestOffset`` takes Spark's start and read limit, which makes
    Spark drive it with admission control (and ``Trigger.AvailableNow``
    through :meth:`prepareForTriggerAvailableNow`, in as many limited
    batches as it takes); the price is one more planner round trip per
    trigger, :meth:`reportLatestOffset`.
    """

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:  # type: ignore[override]
        return self.next_end(start, limit)

    def getDefaultReadLimit(self) -> ReadLimit:
        """Spark's own read limit carries the first budget; the byte budget also applies with it."""
        if self.options.max_records_per_trigger is not None:
            return ReadMaxRows(self.options.max_records_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the target: complete epochs as of now, nothing appended later."""
        self._target = {k: s.complete for k, s in self._streams().items()}

    def reportLatestOffset(self) -> dict[str, int]:
        """Each stream's end of complete epochs: Spark shows it as the source's ``latestOffset``.

        Spark asks right after :meth:`latestOffset`, for its progress report:
        the snapshot that call took answers, no index is read again.
        """
        streams = self._selected[1] if self._selected is not None else self._streams()
        return _offsets({k: s.complete for k, s in streams.items()})


def stream_reader(options: SourceOptions, clock: Clock = SYSTEM_CLOCK) -> AqueductStreamReader:
    """The reader for ``options``: with admission control only if a per-trigger limit asks for it."""
    limits = (options.max_records_per_trigger, options.max_bytes_per_trigger, options.min_records_per_trigger)
    if any(v is not None for v in limits):
        return AqueductLimitedStreamReader(options, clock)
    return AqueductStreamReader(options, clock)


def register(spark: object) -> None:
    """Make ``spark.readStream.format("aqueduct")`` available in this session."""
    spark.dataSource.register(AqueductDataSource)  # type: ignore[attr-defined]
