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
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
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

from aqueduct.bridge.admission import admit
from aqueduct.bridge.commits import commit_file, parse_offsets
from aqueduct.bridge.consumers import (
    DEFAULT_CONSUMER,
    ConsumerError,
    check_consumer_name,
    check_not_dropped,
    register_consumer,
)
from aqueduct.bridge.index import IndexEntry, write_atomically
from aqueduct.bridge.schema import SPARK_COLUMNS, SPARK_FIELDS
from aqueduct.bridge.segment import read_batches
from aqueduct.bridge.view import StreamIndex, check_log_dir, load_streams

EARLIEST, LATEST = -2, -1  # startingOffsets' per-stream markers, as in Kafka's

#: Upper bound on records per Spark input partition (a stream's range is
#: split into several partitions above it, for parallelism).
PARTITION_RECORDS = 1 << 20

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


class AqueductOptionError(ValueError):
    """An option of the ``aqueduct`` source is missing or invalid."""


class AqueductDataLoss(RuntimeError):
    """Records the query has not read yet were truncated from the log."""


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of the ``aqueduct`` source."""

    log: str
    max_records_per_trigger: int | None = None
    consumer: str = DEFAULT_CONSUMER
    #: where a new query starts: "earliest", "latest", or {stream id: offset}
    #: (-2 for that stream's earliest, -1 for its latest complete epoch end)
    starting_offsets: str | Mapping[int, int] = "earliest"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Validate Spark's (case-insensitive, lower-cased) option map."""
        known = {"log", "maxrecordspertrigger", "consumer", "startingoffsets"}
        unknown = sorted(k for k in options if k.lower() not in known)
        if unknown:
            raise AqueductOptionError(
                f"aqueduct source: unknown option(s) {', '.join(unknown)}; "
                "known: log, maxRecordsPerTrigger, consumer, startingOffsets"
            )
        opts = {k.lower(): v for k, v in options.items()}
        log = opts.get("log")
        if not log:
            raise AqueductOptionError(
                "aqueduct source: option 'log' (the log directory) is required"
            )
        try:
            check_log_dir(Path(log))
        except ValueError as e:
            raise AqueductOptionError(f"aqueduct source: {e}") from None
        limit = opts.get("maxrecordspertrigger")
        max_records = None
        if limit is not None:
            try:
                max_records = int(limit)
            except ValueError:
                max_records = 0
            if max_records <= 0:
                raise AqueductOptionError(
                    f"aqueduct source: maxRecordsPerTrigger must be a positive integer, got {limit!r}"
                )
        consumer = opts.get("consumer", DEFAULT_CONSUMER)
        try:
            check_consumer_name(consumer)
        except ConsumerError as e:
            raise AqueductOptionError(f"aqueduct source: {e}") from None
        return cls(log, max_records, consumer, _starting_offsets(opts.get("startingoffsets", "earliest")))


def _starting_offsets(text: str) -> str | dict[int, int]:
    """``earliest``, ``latest`` or a JSON object ``{"<stream id>": offset, -2 or -1}``."""
    if text in ("earliest", "latest"):
        return text
    problem = (
        "aqueduct source: startingOffsets must be 'earliest', 'latest' or a JSON object "
        f'{{"<stream id>": <offset>, -2 (earliest) or -1 (latest)}}, got {text!r}'
    )
    try:
        doc = json.loads(text)
    except ValueError:
        raise AqueductOptionError(problem) from None
    if not isinstance(doc, dict) or not all(
        isinstance(k, str) and k.isdigit() and isinstance(v, int) and not isinstance(v, bool) and v >= -2
        for k, v in doc.items()
    ):
        raise AqueductOptionError(problem)
    return {int(k): v for k, v in doc.items()}


def _start_of(s: StreamIndex, wanted: int) -> int:
    """Where a stream starts for ``startingOffsets`` entry ``wanted``: always an epoch boundary."""
    if wanted == EARLIEST:
        return s.earliest
    if wanted == LATEST:
        return s.complete
    if wanted < s.earliest:
        raise AqueductDataLoss(
            f"aqueduct source: startingOffsets asks for stream {s.stream_id} at {wanted}, "
            f"but the log keeps it only from {s.earliest}"
        )
    if wanted > s.complete:
        raise AqueductOptionError(
            f"aqueduct source: startingOffsets asks for stream {s.stream_id} at {wanted}, "
            f"beyond the end of its last complete epoch ({s.complete})"
        )
    if wanted < s.complete and s.first_offset_of_epoch_at_least(s.epoch_at(wanted)) != wanted:
        raise AqueductOptionError(
            f"aqueduct source: startingOffsets asks for stream {s.stream_id} at {wanted}, inside "
            "an epoch; a query starts at an epoch boundary so it never sees part of one"
        )
    return wanted


class AqueductDataSource(DataSource):
    """Spark data source ``aqueduct``: every record of a durable log, exactly once."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = SourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return "aqueduct"

    def schema(self) -> StructType:
        return SPARK_STRUCT

    def streamReader(self, schema: StructType) -> AqueductStreamReader:
        return AqueductStreamReader(self.parsed)


class AqueductPartition(InputPartition):
    """Records ``[start, end)`` of one stream, with the index entries that hold them.

    Carrying the entries makes :meth:`AqueductStreamReader.read` independent
    of later index changes: the same partition always yields the same rows.
    """

    def __init__(
        self, directory: str, stream_id: int, start: int, end: int, entries: tuple[IndexEntry, ...]
    ) -> None:
        super().__init__((stream_id, start, end))
        self.directory = directory
        self.stream_id = stream_id
        self.start = start
        self.end = end
        self.entries = entries


def _check_not_truncated(streams: Mapping[int, StreamIndex], starts: Mapping[int, int]) -> None:
    """Refuse to go on silently when records this query still needs are gone."""
    for sid, s in streams.items():
        pos = starts.get(sid, 0)
        if pos < s.earliest:
            raise AqueductDataLoss(
                f"aqueduct source: stream {sid} records [{pos}, {s.earliest}) were truncated "
                "from the log before this query read them (the log keeps records only for "
                "registered consumers: give each query its own 'consumer' name, see "
                "`aqueduct-bridge consumers list`)"
            )


def _offsets(positions: Mapping[int, int]) -> dict[str, int]:
    """Spark offset dict: string keys in numeric order, so the JSON text is canonical."""
    return {str(sid): positions[sid] for sid in sorted(positions)}


class AqueductStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over memory-mapped Arrow segments."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._target: dict[int, int] | None = None
        self._turn = 0

    def initialOffset(self) -> dict[str, int]:
        """Where ``startingOffsets`` says (default: the earliest records still stored).

        Spark asks only when a query starts without a checkpoint, so this is
        also where its consumer joins the log's registry (or, dropped
        before, joins anew). From the earliest record, it registers first
        and reads the log after, so truncation cannot pass the start this
        returns except in the moment before the bridge re-reads the
        registry, which the data-loss check then reports.
        """
        log = Path(self.options.log)
        wanted = self.options.starting_offsets
        if wanted == "earliest":
            register_consumer(log, self.options.consumer, {})
        streams = load_streams(log)
        default = LATEST if wanted == "latest" else EARLIEST
        per_stream = wanted if isinstance(wanted, Mapping) else {}
        unknown = sorted(set(per_stream) - set(streams))
        if unknown:
            raise AqueductOptionError(f"aqueduct source: startingOffsets names streams the log does not have: {unknown}")
        start = {sid: _start_of(s, per_stream.get(sid, default)) for sid, s in streams.items()}
        if wanted != "earliest":
            register_consumer(log, self.options.consumer, start)
        return _offsets(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_records_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_records_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the target: complete epochs as of now, nothing appended later."""
        streams = load_streams(Path(self.options.log))
        self._target = {sid: s.complete for sid, s in streams.items()}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        """End of the next micro-batch: whole epochs, at most the limit (see admission)."""
        starts = parse_offsets(start)
        try:
            check_not_dropped(Path(self.options.log), self.options.consumer)
        except ConsumerError as e:
            raise AqueductDataLoss(f"aqueduct source: {e}") from None
        streams = load_streams(Path(self.options.log))
        _check_not_truncated(streams, starts)
        completes = {sid: s.complete for sid, s in streams.items()}
        if self._target is not None:
            completes = {sid: min(c, self._target.get(sid, 0)) for sid, c in completes.items()}
        for sid, pos in starts.items():
            completes[sid] = max(completes.get(sid, pos), pos)
        completes = {sid: c for sid, c in completes.items() if c > 0 or sid in starts}
        if isinstance(limit, ReadMaxRows):
            max_records: int | None = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            max_records = None
        else:
            raise ValueError(f"aqueduct source: unsupported read limit {limit!r}")
        self._turn += 1
        return _offsets(admit(starts, completes, streams, max_records, self._turn))

    def reportLatestOffset(self) -> dict[str, int]:
        streams = load_streams(Path(self.options.log))
        return _offsets({sid: s.complete for sid, s in streams.items()})

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[AqueductPartition]:
        """One partition per stream range, split every :data:`PARTITION_RECORDS` records."""
        starts, ends = parse_offsets(start), parse_offsets(end)
        streams = load_streams(Path(self.options.log))
        _check_not_truncated({sid: streams[sid] for sid in ends}, starts)
        parts = []
        for sid, stop in ends.items():
            lo = starts.get(sid, 0)
            if stop <= lo:
                continue
            s = streams[sid]
            for a in range(lo, stop, PARTITION_RECORDS):
                b = min(stop, a + PARTITION_RECORDS)
                parts.append(
                    AqueductPartition(str(s.directory), sid, a, b, tuple(s.entries_between(a, b)))
                )
        return parts

    def read(self, partition: AqueductPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        """Arrow batches of the partition's records, BOUNDARY markers left out."""
        p = partition
        for batch in read_batches(Path(p.directory), p.entries, p.start, p.end):
            rows = batch.filter(pc.invert(batch.column("boundary"))).select(list(SPARK_COLUMNS))
            if rows.num_rows:
                yield rows

    def commit(self, end: dict[str, int]) -> None:
        """Record Spark's committed offsets in the log directory (the safety-net signal)."""
        positions = parse_offsets(end)
        doc = {"offsets": _offsets(positions), "committed_at": time.time()}
        path = commit_file(Path(self.options.log), self.options.consumer)
        path.parent.mkdir(exist_ok=True)
        write_atomically(path, json.dumps(doc).encode())


def register(spark: object) -> None:
    """Make ``spark.readStream.format("aqueduct")`` available in this session."""
    spark.dataSource.register(AqueductDataSource)  # type: ignore[attr-defined]
