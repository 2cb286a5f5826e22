"""The ``aqueduct`` stream reader's contract with Spark, exercised without a JVM.

Spark calls these methods in worker processes with JSON-decoded offsets
and pickled partitions; here they are called the same way, on real files.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from aqueduct.bridge.source.datasource import (
    SPARK_STRUCT,
    AqueductDataLoss,
    AqueductDataSource,
    AqueductOptionError,
    AqueductStreamReader,
)
from aqueduct.bridge.storage.commits import acks_for, commit_file, read_committed
from aqueduct.bridge.storage.consumers import load_consumers
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.bridge.storage.offset import OffsetError
from aqueduct.bridge.storage.schema import SPARK_SCHEMA
from aqueduct.connector.frames import ConnectorMessage
from tests.log_locations import LogLocation

WHERE: LogLocation


def spark_round_trip(obj):
    """What crossing into a Spark worker does to offsets and partitions."""
    return pickle.loads(pickle.dumps(obj))


@pytest.fixture(autouse=True, params=["log", "bridge"])
def where(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Every test reads the log from its directory, then over a bridge's Flight server."""
    global WHERE
    WHERE = LogLocation(request.param, tmp_path_factory.mktemp("flight"))
    yield WHERE
    WHERE.close()



@pytest.fixture
def log(tmp_path: Path):
    lg = DurableLog(tmp_path / "log")
    lg.open_stream(10, "ten", "c/1", boundaries=True).result()
    lg.open_stream(2, "two", "c/1").result()
    yield lg
    lg.close()


def reader(log: DurableLog, **options: str) -> AqueductStreamReader:
    source = AqueductDataSource({**WHERE.options(log.path), **options})
    return spark_round_trip(source.streamReader(SPARK_STRUCT))


def read_all(r: AqueductStreamReader, start: dict, end: dict) -> list[dict]:
    parts = spark_round_trip(r.partitions(start, end))
    return [row for p in parts for b in r.read(p) for row in b.to_pylist()]


def test_spark_schema_is_exactly_the_arrow_schema_read_yields() -> None:
    assert to_arrow_schema(SPARK_STRUCT, timezone="UTC").equals(SPARK_SCHEMA)


def test_offsets_are_canonical_json_and_cover_complete_epochs_only(log: DurableLog) -> None:
    for i in range(3):
        log.append(ConnectorMessage.build(10, b"e0-%d" % i, message_id=i))
    log.append(ConnectorMessage.build(10, message_id=3, boundary=True))
    log.append(ConnectorMessage.build(10, b"open", message_id=4))  # epoch 1 still open
    log.append(ConnectorMessage.build(2, b"x", message_id=0))
    log.commit()
    r = reader(log)
    start = r.initialOffset()
    assert json.dumps(start) == '{"2": 0, "10": 0}'
    end = r.next_end(start, ReadAllAvailable())
    assert json.dumps(end) == '{"2": 1, "10": 4}'
    rows = read_all(r, start, end)
    assert sorted(row["payload"] for row in rows) == [b"e0-0", b"e0-1", b"e0-2", b"x"]
    assert read_all(r, start, end) == rows  # deterministic
    assert r.next_end(end, ReadAllAvailable()) == end  # nothing new


def test_max_rows_never_splits_an_epoch(log: DurableLog) -> None:
    ids = iter(range(100))
    for size in (2, 5, 1):
        for _ in range(size):
            log.append(ConnectorMessage.build(10, b"", message_id=next(ids)))
        log.append(ConnectorMessage.build(10, message_id=next(ids), boundary=True))
    log.commit()
    r = reader(log, maxRecordsPerTrigger="4")
    assert r.getDefaultReadLimit() == ReadMaxRows(4)
    pos, ends = r.initialOffset(), []
    for _ in range(10):
        nxt = r.next_end(pos, r.getDefaultReadLimit())
        if nxt == pos:
            break
        ends.append(nxt["10"])
        pos = nxt
    assert ends == [3, 9, 11]  # epoch ends only; the 6-record epoch alone and whole


def test_available_now_ignores_data_appended_after_prepare(log: DurableLog) -> None:
    log.append(ConnectorMessage.build(2, b"before", message_id=0))
    log.commit()
    r = reader(log, maxRecordsPerTrigger="100")  # without limits, Spark's own wrapper does this
    r.prepareForTriggerAvailableNow()
    log.append(ConnectorMessage.build(2, b"after", message_id=1))
    log.commit()
    assert r.next_end(r.initialOffset(), ReadAllAvailable()) == {"2": 1, "10": 0}


def test_new_stream_appears_in_later_offsets(log: DurableLog) -> None:
    r = reader(log)
    start = r.initialOffset()
    log.open_stream(7, "late", "c/2")
    log.append(ConnectorMessage.build(7, b"hi"))
    log.commit()
    end = r.next_end(start, ReadAllAvailable())
    assert end == {"2": 0, "7": 1, "10": 0}
    assert [row["payload"] for row in read_all(r, start, end)] == [b"hi"]


def test_commit_writes_the_safety_net_file_and_acks_follow(log: DurableLog) -> None:
    for i in range(3):
        log.append(ConnectorMessage.build(2, b"", message_id=10 + i))
    log.commit()
    r = reader(log, consumer="q1")
    r.commit({"2": 2, "10": 0})
    committed = read_committed(log.path, "q1")
    assert committed == {2: 2, 10: 0}
    assert acks_for(log, committed) == {2: 12, 10: 0}
    assert read_committed(log.path, "other") is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "option 'log' .* is required"),
        ({"log": "/nonexistent/aq"}, "does not exist"),
        ({"maxRecordsPerTrigger": "0"}, "maxRecordsPerTrigger must be a positive integer, got '0'"),
        ({"maxRecordsPerTrigger": "ten"}, "positive integer, got 'ten'"),
        ({"startingOffset": "earliest"}, r"unknown option 'startingOffset'; did you mean 'startingOffsets'\?$"),
        ({"startingOffsets": "middle"}, "startingOffsets must be 'earliest', 'latest' or a JSON object"),
        ({"startingOffsets": '{"1": -3}'}, "startingOffsets must be"),
        ({"startingOffsets": '{"x": 1}'}, "startingOffsets must be"),
        ({"startingOffsets": "[1]"}, "startingOffsets must be"),
        ({"consumer": "../x"}, "consumer name must be 1-128 letters"),
    ],
)
def test_options_are_validated(log: DurableLog, options: dict, message: str) -> None:
    opts = {"log": str(log.path), **options} if "log" not in options and options else options
    with pytest.raises(AqueductOptionError, match=message):
        AqueductDataSource(opts)


def test_a_malformed_offset_from_spark_is_refused_with_the_one_offset_error(log: DurableLog) -> None:
    r = reader(log)
    with pytest.raises(OffsetError) as raised:
        r.next_end({"2": -1, "10": 0}, ReadAllAvailable())
    assert str(raised.value) == (
        'aqueduct offset: expected a JSON object {"<stream id>": <position>, ...} '
        "with non-negative integer positions, got '2': -1"
    )


def test_records_truncated_before_the_query_read_them_fail_loudly(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log", segment_bytes=1) as lg:
        lg.open_stream(1, "s", "c/1")
        r = reader(lg)
        start = r.initialOffset()  # {} : the stream is still empty
        for i in range(3):
            lg.append(ConnectorMessage.build(1, b"", message_id=i))
            lg.commit()
        assert lg.truncate(1, 2).result() == 2  # as if another query had committed up to 2
        with pytest.raises(AqueductDataLoss, match=r"stream 1 records \[0, 2\) were truncated"):
            r.next_end(start, ReadAllAvailable())
        assert r.initialOffset() == {"1": 2}  # a new query starts at what is left


def epochs(log: DurableLog) -> None:
    """Stream 10: epochs [0, 3) and [3, 6) closed, one record of a third open; stream 2: 2 records."""
    for i in range(7):
        log.append(ConnectorMessage.build(10, b"e%d" % i, message_id=i, boundary=i in (2, 5)))
    for i in range(2):
        log.append(ConnectorMessage.build(2, b"x", message_id=i))
    log.commit()


@pytest.mark.parametrize(
    ("starting", "start"),
    [
        ("earliest", {"2": 0, "10": 0}),
        ("latest", {"2": 2, "10": 6}),  # the end of the last complete epoch, never inside one
        ('{"10": 3}', {"2": 0, "10": 3}),  # unnamed streams start at their earliest
        ('{"10": -1, "2": -2}', {"2": 0, "10": 6}),
    ],
)
def test_starting_offsets_start_at_an_epoch_boundary(log: DurableLog, starting: str, start: dict) -> None:
    epochs(log)
    r = reader(log, startingOffsets=starting, consumer="c")
    assert r.initialOffset() == start
    consumer = load_consumers(log.path)["c"]
    assert not consumer.acks  # a consumer of the source alone never drives producer acks
    assert consumer.start == ({} if starting == "earliest" else {int(k): v for k, v in start.items()})


@pytest.mark.parametrize(
    ("starting", "error", "message"),
    [
        ('{"10": 1}', AqueductOptionError, "stream 10 at 1, inside an epoch"),
        ('{"10": 7}', AqueductOptionError, r"beyond the end of its last complete epoch \(6\)"),
        ('{"99": 0}', AqueductOptionError, r"names streams the log does not have \(or the stream filter leaves out\): \[99\]"),
    ],
)
def test_starting_offsets_that_cannot_be_honoured_are_refused(
    log: DurableLog, starting: str, error: type, message: str
) -> None:
    epochs(log)
    with pytest.raises(error, match=message):
        reader(log, startingOffsets=starting).initialOffset()
    assert "default" not in load_consumers(log.path)  # nothing registered for a refused start


def test_starting_offsets_below_the_retained_records_is_data_loss(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log", segment_bytes=1) as lg:
        lg.open_stream(1, "s", "c/1")
        for i in range(3):
            lg.append(ConnectorMessage.build(1, b"", message_id=i))
            lg.commit()
        assert lg.truncate(1, 2).result() == 2
        with pytest.raises(AqueductDataLoss, match="stream 1 at 0, but the log keeps it only from 2"):
            reader(lg, startingOffsets='{"1": 0}').initialOffset()


def test_asking_for_the_next_batch_records_the_previous_ones_commit(log: DurableLog) -> None:
    """Spark plans the next batch only after the previous one committed; commit() comes a batch later still."""
    for i in range(3):
        log.append(ConnectorMessage.build(2, b"", message_id=i))
    log.commit()
    r = reader(log, consumer="q1")
    start = r.initialOffset()
    end = r.next_end(start, ReadAllAvailable())
    assert read_committed(log.path, "q1") is None  # the query's start is no commit
    assert r.next_end(end, ReadAllAvailable()) == end  # no new record: Spark would not call commit()
    assert read_committed(log.path, "q1") == {2: 3, 10: 0}


def test_sparks_commit_of_what_latest_offset_recorded_writes_nothing(log: DurableLog) -> None:
    """Spark's commit() of the previous batch's end, recorded already by latestOffset, costs no write."""
    for i in range(3):
        log.append(ConnectorMessage.build(2, b"", message_id=i))
    log.commit()
    r = reader(log, consumer="q1")
    end = r.next_end(r.initialOffset(), ReadAllAvailable())
    r.next_end(end, ReadAllAvailable())
    path = commit_file(log.path, "q1")
    written = path.read_bytes()
    r.commit(end)
    assert path.read_bytes() == written  # the same document, committed_at included
    log.append(ConnectorMessage.build(2, b"", message_id=3))
    log.commit()
    later = r.next_end(end, ReadAllAvailable())
    r.commit(later)  # a commit latestOffset did not record yet is written
    assert read_committed(log.path, "q1") == {2: 4, 10: 0}


@pytest.mark.parametrize(
    "options",
    [{}, {"maxRecordsPerTrigger": "5"}, {"maxBytesPerTrigger": "5000"}, {"minRecordsPerTrigger": "5"}],
    ids=["no-limit", "max-records", "max-bytes", "min-records"],
)
def test_only_a_per_trigger_limit_makes_spark_drive_the_reader_with_admission_control(
    log: DurableLog, options: dict
) -> None:
    """pyspark's planner worker reads latestOffset's signature: without arguments, no admission control.

    Spark then asks ``latestOffset()`` alone each trigger, not ``latestOffset``
    and ``reportLatestOffset``. Spark's reader class with AvailableNow support
    is one with admission control, so the plain reader must not declare it.
    """
    from pyspark.sql.streaming import python_streaming_source_runner as runner

    out = io.BytesIO()
    runner.check_support_func(reader(log, **options), out)
    flags = int.from_bytes(out.getvalue(), "big")
    assert bool(flags & runner.SUPPORTS_ADMISSION_CONTROL) == bool(options)
    assert bool(flags & runner.SUPPORTS_TRIGGER_AVAILABLE_NOW) == bool(options)


def test_the_plain_reader_starts_each_batch_where_spark_planned_the_last_one(log: DurableLog) -> None:
    """Spark hands ``latestOffset()`` no start: the end of the batch it planned last is the next start."""
    for i in range(3):
        log.append(ConnectorMessage.build(2, b"", message_id=i))
    log.commit()
    r = reader(log, consumer="q1")
    start = r.initialOffset()
    end = r.latestOffset()
    assert end == {"2": 3, "10": 0}
    assert len(read_all(r, start, end)) == 3  # Spark plans and runs the batch, then commits it
    assert read_committed(log.path, "q1") is None  # the query's start is no commit
    assert r.latestOffset() == end  # nothing new; Spark asks only once the batch committed...
    assert read_committed(log.path, "q1") == {2: 3, 10: 0}  # ...so that commit is recorded
    log.append(ConnectorMessage.build(2, b"", message_id=3))
    log.commit()
    later = r.latestOffset()
    assert later == {"2": 4, "10": 0}
    assert [row["message_id"] for row in read_all(r, end, later)] == [3]


def test_a_restarted_plain_reader_records_no_commit_of_a_batch_it_did_not_see_run(log: DurableLog) -> None:
    """On restart Spark names its latest offset (the partitions of an empty range): that batch may re-run."""
    for i in range(3):
        log.append(ConnectorMessage.build(2, b"", message_id=i))
    log.commit()
    r = reader(log, consumer="q1")
    assert r.latestOffset() == {"2": 3, "10": 0}  # no start known yet: every complete epoch, at once
    seen = {"2": 2, "10": 0}
    assert r.partitions(seen, seen) == []  # setLatestSeenOffset: batch ending at 2 is in the offset log
    assert r.latestOffset() == {"2": 3, "10": 0}
    assert read_committed(log.path, "q1") is None
    assert len(read_all(r, {"2": 0, "10": 0}, seen)) == 2  # Spark re-runs that batch, commits it...
    assert r.latestOffset() == {"2": 3, "10": 0}
    assert read_committed(log.path, "q1") == {2: 2, 10: 0}  # ...and asks on: now it is a commit


def forbid_index_reads(r: AqueductStreamReader) -> None:
    """From now on, any read of an index by ``r``'s planner fails the test."""

    def no_reload() -> None:
        raise AssertionError("an index was read again")

    for _, snapshots in r._snapshots or ():
        snapshots.load = no_reload  # type: ignore[method-assign]


def test_partitions_plan_from_the_snapshot_latest_offset_took(log: DurableLog) -> None:
    """Planning the batch latestOffset just ended reads no index again, however much was appended since."""
    for i in range(3):
        log.append(ConnectorMessage.build(2, b"a%d" % i, message_id=i))
    log.commit()
    r = reader(log, consumer="q1")
    start = r.initialOffset()
    end = r.next_end(start, ReadAllAvailable())
    log.append(ConnectorMessage.build(2, b"later", message_id=3))
    log.commit()
    forbid_index_reads(r)
    parts = spark_round_trip(r.partitions(start, end))
    assert [row["payload"] for p in parts for b in r.read(p) for row in b.to_pylist()] == [b"a0", b"a1", b"a2"]


def test_the_latest_offset_spark_reports_is_the_one_latest_offset_saw(log: DurableLog) -> None:
    """Spark asks reportLatestOffset right after latestOffset, for its progress: no index is read again."""
    log.append(ConnectorMessage.build(2, b"a", message_id=0))
    log.commit()
    r = reader(log, consumer="q1", maxRecordsPerTrigger="100")  # Spark asks only a reader with limits
    assert r.reportLatestOffset() == {"2": 1, "10": 0}  # before any latestOffset: read now
    end = r.next_end(r.initialOffset(), ReadAllAvailable())
    log.append(ConnectorMessage.build(2, b"later", message_id=1))
    log.commit()
    forbid_index_reads(r)
    assert r.reportLatestOffset() == end == {"2": 1, "10": 0}
