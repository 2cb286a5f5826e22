"""The source's options beyond the basics, on real log files, called as Spark calls them.

Batch reads, the byte budget, the minimum batch with its delay, the stream
filter, skipping truncated records when told to, and every bad value with
the error a user sees.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes

from aqueduct.bridge.source.datasource import (
    IDLE_POLL,
    REMOTE_IDLE_POLL,
    SPARK_STRUCT,
    AqueductDataLoss,
    AqueductDataSource,
    AqueductLimitedStreamReader,
    AqueductOptionError,
    AqueductStreamReader,
    read_partition,
)
from aqueduct.bridge.source.datasource import stream_reader as reader_for
from aqueduct.bridge.source.options import SourceOptions
from aqueduct.bridge.storage.commits import commit_file
from aqueduct.bridge.storage.consumers import load_consumers
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.frames import ConnectorMessage
from tests.log_locations import LogLocation

WHERE: LogLocation


@pytest.fixture
def log(tmp_path: Path):
    """Streams 1 "orders-eu", 2 "orders-us", 3 "clicks": epochs of 4 records (3 + BOUNDARY)."""
    lg = DurableLog(tmp_path / "log", segment_bytes=1)
    for sid, name in ((1, "orders-eu"), (2, "orders-us"), (3, "clicks")):
        lg.open_stream(sid, name, "c/1", boundaries=True).result()
    yield lg
    lg.close()


def fill(log: DurableLog, epochs: int = 3, payload: bytes = b"x" * 100, after: int = 0) -> None:
    """``epochs`` more epochs on each stream, after ``after`` epochs already there."""
    ids = dict.fromkeys((1, 2, 3), 4 * after)
    for _ in range(epochs):
        for sid in (1, 2, 3):
            for _ in range(3):
                log.append(ConnectorMessage.build(sid, payload, message_id=ids[sid]))
                ids[sid] += 1
            log.append(ConnectorMessage.build(sid, message_id=ids[sid], boundary=True))
            ids[sid] += 1
        log.commit()  # one index entry (and segment) per epoch and stream


def source(log: DurableLog, **options: str) -> AqueductDataSource:
    return pickle.loads(pickle.dumps(AqueductDataSource({**WHERE.options(log.path), **options})))


@pytest.fixture(autouse=True, params=["log", "bridge"])
def where(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Every test reads the log from its directory, then over a bridge's Flight server."""
    global WHERE
    WHERE = LogLocation(request.param, tmp_path_factory.mktemp("flight"))
    yield WHERE
    WHERE.close()



def rows_of(r, parts) -> list[tuple[int, int]]:
    parts = pickle.loads(pickle.dumps(parts))
    return [(row["stream_id"], row["message_id"]) for p in parts for b in r.read(p) for row in b.to_pylist()]


def stream_reader(log: DurableLog, **options: str):
    return pickle.loads(pickle.dumps(source(log, **options).streamReader(SPARK_STRUCT)))


def test_a_batch_read_returns_whole_epochs_between_starting_and_ending_offsets(log: DurableLog) -> None:
    fill(log)
    log.append(ConnectorMessage.build(1, b"open", message_id=12))  # epoch 3 of stream 1 still open
    log.commit()
    r = source(log).reader(SPARK_STRUCT)
    everything = rows_of(r, r.partitions())
    assert len(everything) == 27 and (1, 12) not in everything  # complete epochs only
    r = source(log, startingOffsets='{"1": 4}', endingOffsets='{"1": 8, "2": -1}', streams="1,2").reader(SPARK_STRUCT)
    assert rows_of(r, r.partitions()) == [(1, 4), (1, 5), (1, 6)] + [(2, i) for i in range(12) if i % 4 != 3]
    assert load_consumers(log.path) == {}  # a batch read is no consumer
    assert not commit_file(log.path, "default").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"endingOffsets": '{"1": 5}'}, "endingOffsets asks for stream 1 at 5, inside an epoch"),
        ({"endingOffsets": '{"1": 40}'}, r"beyond the end of its last complete epoch \(12\)"),
        ({"endingOffsets": '{"1": -2}'}, "endingOffsets must be 'latest' or a JSON object"),
        ({"endingOffsets": "earliest"}, "endingOffsets must be 'latest' or a JSON object"),
        ({"startingOffsets": '{"1": 8}', "endingOffsets": '{"1": 4}'}, "endingOffsets 4 of stream 1 is before"),
        ({"maxRecordsPerTrigger": "5"}, "maxRecordsPerTrigger only apply to streaming queries"),
        ({"consumer": "audit"}, "consumer only apply to streaming queries"),
    ],
)
def test_bad_batch_reads_are_refused(log: DurableLog, options: dict, message: str) -> None:
    fill(log)
    with pytest.raises(AqueductOptionError, match=message):
        source(log, **options).reader(SPARK_STRUCT).partitions()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"failOnDataLoss": "no"}, "failOnDataLoss must be 'true' or 'false', got 'no'"),
        ({"maxBytesPerTrigger": "-1"}, "maxBytesPerTrigger must be a positive integer, got '-1'"),
        ({"minRecordsPerTrigger": "1.5"}, "minRecordsPerTrigger must be a positive integer"),
        ({"minRecordsPerTrigger": "5", "maxTriggerDelay": "soon"}, "maxTriggerDelay must be a duration"),
        ({"maxTriggerDelay": "5s"}, "maxTriggerDelay only applies with minRecordsPerTrigger"),
        ({"minPartitions": "0"}, "minPartitions must be a positive integer, got '0'"),
        ({"idleWait": "a while"}, "idleWait must be a duration such as '500ms'"),
        ({"streams": "1,two"}, "streams must be stream ids separated by commas"),
        ({"streamPattern": "("}, "streamPattern '\\(' is not a regular expression"),
        ({"streams": "1", "streamPattern": "x"}, "streams and streamPattern exclude each other"),
        ({"subscribe": "1"}, r"option subscribe \(Kafka's\) does not apply: streams are chosen by id"),
    ],
)
def test_bad_option_values_are_refused_when_the_query_is_defined(
    log: DurableLog, options: dict, message: str
) -> None:
    with pytest.raises(AqueductOptionError, match=message):
        source(log, **options)


def test_ending_offsets_on_a_stream_is_refused(log: DurableLog) -> None:
    with pytest.raises(AqueductOptionError, match="endingOffsets is for batch reads"):
        source(log, endingOffsets="latest").streamReader(SPARK_STRUCT)


def test_a_byte_budget_admits_whole_epochs_up_to_the_bytes(log: DurableLog) -> None:
    fill(log, epochs=4)
    r = stream_reader(log, maxBytesPerTrigger="1000", streams="1")
    assert r.getDefaultReadLimit() == ReadMaxBytes(1000)
    pos, ends = r.initialOffset(), []
    for _ in range(10):
        nxt = r.next_end(pos, r.getDefaultReadLimit())
        if nxt == pos:
            break
        ends.append(nxt["1"])
        pos = nxt
    # An epoch of three 100-byte payloads takes a few hundred bytes as stored: two fit in 1000.
    assert ends and all(e % 4 == 0 for e in ends) and ends[-1] == 16
    assert 1 < len(ends) < 16 // 4 + 1


class ManualClock:
    """Time that passes only when the reader sleeps; what is due by then happens in that sleep."""

    def __init__(self) -> None:
        self.now = 1000.0
        self._due: list[tuple[float, Callable[[], None]]] = []

    def at(self, when: float, action: Callable[[], None]) -> None:
        self._due.append((when, action))

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for item in [d for d in self._due if d[0] <= self.now]:
            self._due.remove(item)
            item[1]()


def clocked_reader(log: DurableLog, clock: ManualClock, **options: str) -> AqueductStreamReader:
    return reader_for(SourceOptions.parse({**WHERE.options(log.path), **options}), clock=clock)


def test_min_records_waits_for_more_until_the_delay_passes(log: DurableLog) -> None:
    fill(log, epochs=1)  # 4 records per stream, 12 in all
    clock = ManualClock()
    r = clocked_reader(log, clock, minRecordsPerTrigger="20", maxTriggerDelay="300ms")
    start = r.initialOffset()
    assert r.next_end(start, ReadAllAvailable()) == start  # 12 < 20: no batch yet
    fill(log, epochs=1, after=1)
    end = r.next_end(start, ReadAllAvailable())
    assert sum(end.values()) == 24  # enough now
    fill(log, epochs=1, after=2)
    assert r.next_end(end, ReadAllAvailable()) == end  # 12 new: wait...
    clock.sleep(0.29)
    assert r.next_end(end, ReadAllAvailable()) == end  # ...still, within the delay...
    clock.sleep(0.02)
    assert sum(r.next_end(end, ReadAllAvailable()).values()) == 36  # ...but not past it
    r.prepareForTriggerAvailableNow()  # AvailableNow never waits: it would stop short
    assert r.next_end(start, ReadAllAvailable()) != start


def test_idle_wait_answers_as_soon_as_a_group_commit_lands_and_gives_up_after_the_wait(
    log: DurableLog,
) -> None:
    fill(log, epochs=1)
    clock = ManualClock()
    r = clocked_reader(log, clock, idleWait="2s")
    start = r.initialOffset()
    began = clock.now
    end = r.next_end(start, ReadAllAvailable())
    assert sum(end.values()) == 12 and clock.now == began  # data waiting: no wait at all
    clock.at(began + 0.2, lambda: fill(log, epochs=1, after=1))
    later = r.next_end(end, ReadAllAvailable())
    assert sum(later.values()) == 24
    # woke on the commit (within one look at the journal, or one question to a bridge), not after 2 s
    assert 0.2 <= clock.now - began <= 0.2 + REMOTE_IDLE_POLL + IDLE_POLL
    began = clock.now
    assert r.next_end(later, ReadAllAvailable()) == later  # nothing came: same offsets...
    assert clock.now - began == pytest.approx(2.0)  # ...after the whole wait, no longer


def test_idle_wait_is_a_streaming_option(log: DurableLog) -> None:
    with pytest.raises(AqueductOptionError, match="idleWait only apply to streaming queries"):
        source(log, idleWait="1s").reader(SPARK_STRUCT)


def test_a_stream_filter_reads_and_registers_only_what_it_selects(log: DurableLog) -> None:
    fill(log, epochs=1)
    r = stream_reader(log, streamPattern="orders-.*", consumer="orders")
    start = r.initialOffset()
    end = r.next_end(start, ReadAllAvailable())
    assert end == {"1": 4, "2": 4}
    assert {sid for sid, _ in rows_of(r, r.partitions(start, end))} == {1, 2}
    assert load_consumers(log.path)["orders"].reads.to_json() == {"pattern": "orders-.*"}
    log.open_stream(4, "orders-jp", "c/1", boundaries=True).result()  # matching streams join later
    log.open_stream(5, "views", "c/1", boundaries=True).result()
    for sid in (4, 5):
        log.append(ConnectorMessage.build(sid, b"y", message_id=0))
        log.append(ConnectorMessage.build(sid, message_id=1, boundary=True))
    log.commit()
    assert r.next_end(end, ReadAllAvailable()) == {"1": 4, "2": 4, "4": 2}


def test_fail_on_data_loss_false_skips_what_was_truncated_and_counts_it(log: DurableLog) -> None:
    fill(log, epochs=3)
    r = stream_reader(log, failOnDataLoss="false", streams="1")
    start = r.initialOffset()
    assert log.truncate(1, 8).result() == 8  # as if a dropped consumer let it go
    end = r.next_end(start, ReadAllAvailable())
    assert end == {"1": 12}
    assert [m for _, m in rows_of(r, r.partitions(start, end))] == [8, 9, 10]
    r.commit(end)
    r.commit(end)  # counted once
    assert json.loads(commit_file(log.path, "default").read_text())["skipped_records"] == 8
    strict = stream_reader(log, streams="1")
    with pytest.raises(AqueductDataLoss, match=r"stream 1 records \[0, 8\) were truncated"):
        strict.next_end(start, ReadAllAvailable())


def test_partitions_read_the_same_rows_whoever_reads_them(log: DurableLog) -> None:
    fill(log)
    r = stream_reader(log, minPartitions="3")
    start = r.initialOffset()
    end = r.next_end(start, ReadAllAvailable())
    parts = r.partitions(start, end)
    assert len(parts) >= 3
    assert rows_of(r, parts) == rows_of(r, r.partitions(start, end))
    assert sorted(rows_of(r, parts)) == [(sid, m) for sid in (1, 2, 3) for m in range(12) if m % 4 != 3]
    assert [b.num_rows for p in parts for b in read_partition(p, r.logs)]  # the module function is what read uses


def test_one_query_over_two_logs_qualifies_stream_ids_by_log(tmp_path: Path) -> None:
    for name in ("eu", "us"):
        with DurableLog(tmp_path / name / "log") as lg:
            lg.open_stream(1, "orders", f"{name}/1")  # the same stream id in both
            lg.append(ConnectorMessage.build(1, name.encode(), message_id=0))
            lg.commit()
    logs = f"eu={tmp_path / 'eu' / 'log'},us={tmp_path / 'us' / 'log'}"
    src = pickle.loads(pickle.dumps(AqueductDataSource({"log": logs, "consumer": "both"})))
    assert src.schema().fieldNames()[-1] == "log"
    r = pickle.loads(pickle.dumps(src.streamReader(src.schema())))
    start = r.initialOffset()
    assert start == {"eu/1": 0, "us/1": 0}
    end = r.next_end(start, ReadAllAvailable())
    assert end == {"eu/1": 1, "us/1": 1}
    rows = [row for p in r.partitions(start, end) for b in r.read(p) for row in b.to_pylist()]
    assert sorted((row["log"], row["stream_id"], row["payload"]) for row in rows) == [
        ("eu", 1, b"eu"), ("us", 1, b"us"),
    ]  # fmt: skip
    r.commit(end)
    for name in ("eu", "us"):  # each log's bridge sees the consumer and its plain positions
        log_dir = tmp_path / name / "log"
        assert "both" in load_consumers(log_dir)
        assert json.loads(commit_file(log_dir, "both").read_text())["offsets"] == {"1": 1}
    later = pickle.loads(pickle.dumps(AqueductDataSource({"log": logs, "startingOffsets": '{"us/1": 1}'})))
    assert later.streamReader(later.schema()).initialOffset() == {"eu/1": 0, "us/1": 1}


@pytest.mark.parametrize(
    ("logs", "message"),
    [
        ("a={a},a={b}", "two logs named alike"),
        ("{a},{a}", "two logs named alike"),
        ("e u={a},us={b}", "log names must be 1-64 letters, digits"),
        ("eu={a},us={missing}", "does not exist"),
    ],
)
def test_bad_log_lists_are_refused(tmp_path: Path, logs: str, message: str) -> None:
    for name in ("a", "b"):
        DurableLog(tmp_path / name / "log").close()
    text = logs.format(a=tmp_path / "a" / "log", b=tmp_path / "b" / "log", missing=tmp_path / "nope")
    with pytest.raises(AqueductOptionError, match=message):
        AqueductDataSource({"log": text})
    with pytest.raises(AqueductOptionError, match='"<log name>/<stream id>"'):
        AqueductDataSource({"log": f"x={tmp_path / 'a' / 'log'},y={tmp_path / 'b' / 'log'}", "startingOffsets": '{"1": 0}'})


@pytest.mark.parametrize(
    ("kafka", "ours", "value"),
    [
        ("maxOffsetsPerTrigger", "maxRecordsPerTrigger", "8"),
        ("minOffsetsPerTrigger", "minRecordsPerTrigger", "8"),
        ("subscribePattern", "streamPattern", "orders-.*"),
    ],
)
def test_kafkas_names_mean_what_ours_do(log: DurableLog, kafka: str, ours: str, value: str) -> None:
    """A Kafka user's option gives the reader ours would: same parse, same read limit, same streams."""
    fill(log, epochs=4)
    theirs, mine = source(log, **{kafka: value}).parsed, source(log, **{ours: value}).parsed
    assert theirs == mine
    a, b = source(log, **{kafka: value}).streamReader(SPARK_STRUCT), source(log, **{ours: value}).streamReader(SPARK_STRUCT)
    assert type(a) is type(b)
    if isinstance(a, AqueductLimitedStreamReader):
        assert a.getDefaultReadLimit() == b.getDefaultReadLimit()
        assert a.latestOffset(a.initialOffset(), a.getDefaultReadLimit()) == b.latestOffset(
            b.initialOffset(), b.getDefaultReadLimit()
        )
    else:
        a.initialOffset(), b.initialOffset()
        assert a.latestOffset() == b.latestOffset()


def test_an_option_given_under_both_names_is_refused(log: DurableLog) -> None:
    with pytest.raises(AqueductOptionError, match="^aqueduct source: maxRecordsPerTrigger and maxOffsetsPerTrigger "
                                                  "are the same option; give one$"):  # fmt: skip
        source(log, maxRecordsPerTrigger="5", maxOffsetsPerTrigger="5")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kafka.bootstrap.servers": "h:9092"}, r"option kafka\.bootstrap\.servers \(Kafka's\) does not apply: the "
                                                r"aqueduct source reads a log directory: option log$"),
        ({"kafka.security.protocol": "SSL"}, r"option kafka\.security\.protocol \(a Kafka client setting\) does not "
                                             r"apply"),
        ({"startingTimestamp": "1000"}, r"does not apply: not supported: the aqueduct source starts and ends at offsets"),
        ({"kafka.group.id": "g"}, r"does not apply: a query's place in the log is its named consumer: option consumer$"),
        ({"includeHeaders": "true"}, r"records have no headers"),
        ({"maxOffsetPerTrigger": "5"}, r"^aqueduct source: unknown option 'maxOffsetPerTrigger'; did you mean "
                                       r"'maxOffsetsPerTrigger'\?$"),
        ({"maxrecordspertriger": "5"}, r"did you mean 'maxRecordsPerTrigger'\?$"),
        ({"STARTINGOFFSET": "earliest"}, r"did you mean 'startingOffsets'\?$"),
        ({"zzz": "1"}, r"^aqueduct source: unknown option 'zzz'; known: log, bridge, bridgeTokenFile"),
    ],
)  # fmt: skip
def test_unknown_options_say_what_was_meant(log: DurableLog, options: dict, message: str) -> None:
    with pytest.raises(AqueductOptionError, match=message):
        source(log, **options)
