"""The source's options under real local Spark: batch reads, limits, filters, several logs, many streams.

Logs are filled directly with :class:`DurableLog` (no producers needed to
test the reading side); queries run with ``availableNow`` or a short
processing-time trigger and write Parquet, which is read back and checked
row by row.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException
from pyspark.sql.utils import AnalysisException, StreamingQueryException

from aqueduct.bridge.storage.commits import commit_file
from aqueduct.bridge.storage.consumers import load_consumers
from aqueduct.bridge.storage.corruption import corrupt_ranges
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.bridge.storage.segment import segment_name
from aqueduct.connector.frames import ConnectorMessage
from tests.corrupting import flip_a_bit_in_stored_batch
from tests.log_locations import LogLocation

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TIMEOUT = 240  # seconds; only turns a hang into a failure


def fill(log: DurableLog, streams: dict[int, str], epochs: int, per_epoch: int = 3, size: int = 100) -> None:
    """Per stream: ``epochs`` epochs of ``per_epoch`` records (+ BOUNDARY), one group commit per epoch."""
    for e in range(epochs):
        for sid in streams:
            base = e * (per_epoch + 1)
            for i in range(per_epoch):
                log.append(ConnectorMessage.build(sid, b"%d-%d-" % (sid, base + i) + b"x" * size, message_id=base + i))
            log.append(ConnectorMessage.build(sid, message_id=base + per_epoch, boundary=True))
        log.commit()


def make_log(path: Path, streams: dict[int, str], epochs: int, **fill_args: Any) -> Path:
    with DurableLog(path, segment_bytes=1) as log:
        for sid, name in streams.items():
            log.open_stream(sid, name, "shop/a", boundaries=True)
        fill(log, streams, epochs, **fill_args)
    return path


def stream_to_parquet(spark: Any, out: Path, trigger: dict, name: str, **options: str) -> Any:
    reader = spark.readStream.format("aqueduct")
    for k, v in options.items():
        reader = reader.option(k, v)
    return (
        reader.load()
        .writeStream.queryName(name)
        .format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "ck"))
        .trigger(**trigger)
        .start()
    )


def ids(spark: Any, path: Path, *cols: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.read.parquet(str(path)).select(*cols).collect())


def data_files(path: Path) -> list[Path]:
    return [p for p in path.glob("*.parquet")]


STREAMS = {1: "orders-eu", 2: "orders-us", 3: "clicks"}


@pytest.mark.parametrize("where", ["log", "bridge"])
def test_batch_reads_honour_starting_and_ending_offsets(spark: Any, tmp_path: Path, where: str) -> None:
    log = make_log(tmp_path / "log", STREAMS, epochs=3)
    location = LogLocation(where, tmp_path / "flight")  # the log's directory, or a Flight server for it
    try:
        at = location.options(log)
        df = spark.read.format("aqueduct").options(**at).load()
        assert df.count() == 27  # 3 streams x 3 epochs x 3 records; boundaries are not rows
        part = (
            spark.read.format("aqueduct").options(**at)
            .option("streamPattern", "orders-.*")
            .option("startingOffsets", '{"1": 4}').option("endingOffsets", '{"1": 8, "2": 4}')
            .load()
        )  # fmt: skip
        assert sorted((r.stream_id, r.message_id) for r in part.collect()) == [(1, 4), (1, 5), (1, 6), (2, 0), (2, 1), (2, 2)]
        with pytest.raises((AnalysisException, PySparkException), match="inside an epoch"):
            spark.read.format("aqueduct").options(**at).option("endingOffsets", '{"1": 5}').load().collect()
    finally:
        location.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss must be 'true' or 'false'"),
        ({"maxBytesPerTrigger": "0"}, "maxBytesPerTrigger must be a positive integer"),
        ({"minRecordsPerTrigger": "10", "maxTriggerDelay": "later"}, "maxTriggerDelay must be a duration"),
        ({"streams": "1", "streamPattern": "x"}, "streams and streamPattern exclude each other"),
        ({"endingOffsets": "latest"}, "endingOffsets is for batch reads"),
        ({"minPartitions": "-3"}, "minPartitions must be a positive integer"),
    ],
)
def test_bad_options_fail_the_query_definition_with_the_rule(
    spark: Any, tmp_path: Path, options: dict, message: str
) -> None:
    log = make_log(tmp_path / "log", {1: "a"}, epochs=1)
    with pytest.raises((AnalysisException, PySparkException, StreamingQueryException), match=message):
        q = stream_to_parquet(spark, tmp_path / "q", {"availableNow": True}, "bad", log=str(log), **options)
        q.awaitTermination(TIMEOUT)
        if q.exception() is not None:
            raise q.exception()


def test_a_byte_budget_splits_the_backlog_into_whole_epoch_batches(spark: Any, tmp_path: Path) -> None:
    log = make_log(tmp_path / "log", {1: "a"}, epochs=6)  # an epoch stores several hundred bytes
    q = stream_to_parquet(spark, tmp_path / "q", {"availableNow": True}, "bytes", log=str(log),
                          maxBytesPerTrigger="1500")  # fmt: skip
    assert q.awaitTermination(TIMEOUT) and q.exception() is None
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert len(sizes) >= 2 and all(n % 3 == 0 for n in sizes)  # several batches, whole epochs
    assert sum(sizes) == 18
    assert ids(spark, tmp_path / "q" / "data", "message_id") == [(m,) for m in range(24) if m % 4 != 3]


NO_DATA_PROGRESS = "spark.sql.streaming.noDataProgressEventInterval"


def test_min_records_holds_a_batch_until_enough_or_the_delay(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "log"
    with DurableLog(path, segment_bytes=1) as log:
        log.open_stream(1, "a", "shop/a", boundaries=True)
        fill(log, {1: "a"}, epochs=1)  # 3 rows: below the minimum
        # Every trigger reports its progress, the idle ones too: the events the check below waits for.
        spark.conf.set(NO_DATA_PROGRESS, "0")
        try:
            q = stream_to_parquet(spark, tmp_path / "q", {"processingTime": "200 milliseconds"}, "min",
                                  log=str(path), minRecordsPerTrigger="6", maxTriggerDelay="4s")  # fmt: skip
        finally:
            spark.conf.unset(NO_DATA_PROGRESS)
        try:
            deadline = time.monotonic() + TIMEOUT
            while len(q.recentProgress) < 2 and time.monotonic() < deadline:  # triggers that could have read
                time.sleep(0.05)
            assert len(q.recentProgress) >= 2
            assert not [p for p in q.recentProgress if p["numInputRows"]]  # held back
            deadline = time.monotonic() + TIMEOUT
            while not [p for p in q.recentProgress if p["numInputRows"]] and time.monotonic() < deadline:
                time.sleep(0.2)  # ...until maxTriggerDelay passes
            assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [3]
        finally:
            q.stop()


def test_fail_on_data_loss_false_skips_truncated_records_and_counts_them(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "log"
    with DurableLog(path, segment_bytes=1) as log:
        log.open_stream(1, "a", "shop/a", boundaries=True)
        fill(log, {1: "a"}, epochs=1)
        first = stream_to_parquet(spark, tmp_path / "q", {"availableNow": True}, "loss1", log=str(path),
                                  failOnDataLoss="false")  # fmt: skip
        assert first.awaitTermination(TIMEOUT) and first.exception() is None
        for e in (1, 2):
            base = e * 4
            for i in range(3):
                log.append(ConnectorMessage.build(1, b"y", message_id=base + i))
            log.append(ConnectorMessage.build(1, message_id=base + 3, boundary=True))
            log.commit()
        assert log.truncate(1, 8).result() == 8  # epoch 1 gone before the query read it
        again = stream_to_parquet(spark, tmp_path / "q", {"availableNow": True}, "loss2", log=str(path),
                                  failOnDataLoss="false")  # fmt: skip
        assert again.awaitTermination(TIMEOUT) and again.exception() is None
    assert ids(spark, tmp_path / "q" / "data", "message_id") == [(0,), (1,), (2,), (8,), (9,), (10,)]
    assert json.loads(commit_file(path, "default").read_text())["skipped_records"] == 4


def test_a_corrupt_batch_met_by_a_record_budget_stops_the_query_or_is_skipped_and_counted(
    spark: Any, tmp_path: Path
) -> None:
    """The planner's epoch questions under maxRecordsPerTrigger meet the flipped batch before any executor reads it."""
    log = make_log(tmp_path / "log", {1: "a"}, epochs=6)
    bad = flip_a_bit_in_stored_batch(log, 1, 2)  # records [8, 12): the budget's second batch asks where its epochs end
    strict = stream_to_parquet(spark, tmp_path / "strict", {"availableNow": True}, "corrupt1", log=str(log),
                               consumer="strict", maxRecordsPerTrigger="6")  # fmt: skip
    with pytest.raises(StreamingQueryException) as caught:
        strict.awaitTermination(TIMEOUT)
    assert "AqueductDataLoss: aqueduct source: " in str(caught.value)
    assert f"log {str(log)!r} stream 1 records [8, 12) are corrupt: the batch at byte {bad.position} of segment " \
           f"{segment_name(bad.segment)} fails its CRC32C check" in str(caught.value)  # fmt: skip
    assert "in latestOffset" in str(caught.value)  # planning, not a task
    lenient = stream_to_parquet(spark, tmp_path / "lenient", {"availableNow": True}, "corrupt2", log=str(log),
                                consumer="lenient", maxRecordsPerTrigger="6", failOnDataLoss="false")  # fmt: skip
    assert lenient.awaitTermination(TIMEOUT) and lenient.exception() is None
    rows = spark.read.parquet(str(tmp_path / "lenient" / "data")).select("message_id", "payload").collect()
    assert sorted((r.message_id, bytes(r.payload)) for r in rows) == [
        (m, b"1-%d-" % m + b"x" * 100) for m in range(24) if m % 4 != 3 and not 8 <= m < 12
    ]
    assert corrupt_ranges(log) == [(1, 8, 12)]
    assert json.loads(commit_file(log, "lenient").read_text())["skipped_records"] == 4


def test_one_query_over_two_logs_keeps_colliding_stream_ids_apart(spark: Any, tmp_path: Path) -> None:
    eu = make_log(tmp_path / "eu", {1: "orders"}, epochs=2)
    us = make_log(tmp_path / "us", {1: "orders"}, epochs=1)
    q = stream_to_parquet(spark, tmp_path / "q", {"availableNow": True}, "two", log=f"eu={eu},us={us}",
                          consumer="global")  # fmt: skip
    assert q.awaitTermination(TIMEOUT) and q.exception() is None
    rows = ids(spark, tmp_path / "q" / "data", "log", "stream_id", "message_id")
    assert rows == [("eu", 1, m) for m in (0, 1, 2, 4, 5, 6)] + [("us", 1, m) for m in (0, 1, 2)]
    assert json.loads(q.lastProgress["sources"][0]["endOffset"]) == {"eu/1": 8, "us/1": 4}
    for log in (eu, us):  # each log's bridge knows the consumer: it pins and reports it
        assert "global" in load_consumers(log)


def test_two_thousand_small_streams_make_few_tasks_and_files(spark: Any, tmp_path: Path) -> None:
    streams = {sid: f"device-{sid}" for sid in range(2000)}
    log = make_log(tmp_path / "log", streams, epochs=1, per_epoch=9, size=60)  # 18,000 rows
    q = stream_to_parquet(spark, tmp_path / "q", {"availableNow": True}, "many", log=str(log))
    assert q.awaitTermination(TIMEOUT) and q.exception() is None
    files = data_files(tmp_path / "q" / "data")
    assert 1 <= len(files) <= 2  # one task per ~million records, not one per stream
    assert spark.read.parquet(str(tmp_path / "q" / "data")).count() == 18_000
    assert json.loads(q.lastProgress["sources"][0]["latestOffset"])["1999"] == 10  # reported to Spark
    spread = stream_to_parquet(spark, tmp_path / "q2", {"availableNow": True}, "spread", log=str(log),
                               consumer="spread", minPartitions="4")  # fmt: skip
    assert spread.awaitTermination(TIMEOUT) and spread.exception() is None
    assert len(data_files(tmp_path / "q2" / "data")) >= 4


def test_a_stream_filter_and_per_stream_starting_offsets_under_spark(spark: Any, tmp_path: Path) -> None:
    log = make_log(tmp_path / "log", STREAMS, epochs=3)
    q = stream_to_parquet(spark, tmp_path / "q", {"availableNow": True}, "filtered", log=str(log),
                          streams="1,3", startingOffsets='{"1": 8, "3": -1}', consumer="filtered")  # fmt: skip
    assert q.awaitTermination(TIMEOUT) and q.exception() is None
    # Stream 1 from its third epoch, stream 3 from its end (nothing yet), stream 2 not at all.
    assert ids(spark, tmp_path / "q" / "data", "stream_id", "message_id") == [(1, 8), (1, 9), (1, 10)]
    with pytest.raises((AnalysisException, PySparkException, StreamingQueryException), match="inside an epoch"):
        bad = stream_to_parquet(spark, tmp_path / "bad", {"availableNow": True}, "bad-start", log=str(log),
                                startingOffsets='{"1": 5}', consumer="bad")  # fmt: skip
        bad.awaitTermination(TIMEOUT)
        if bad.exception() is not None:
            raise bad.exception()
