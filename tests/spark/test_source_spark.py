"""The ``aqueduct`` source under a real local Spark: rows, epochs, restarts, commit signal."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from aqueduct.bridge.app.commit_listener import install_commit_listener
from aqueduct.bridge.storage.commits import read_committed
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.frames import ConnectorMessage

pytestmark = [pytest.mark.spark, pytest.mark.slow]

QUERY_TIMEOUT = 240  # seconds; only to turn a hang into a failure


def run_available_now(
    spark, log: Path, out: Path, checkpoint: Path, name: str = "available-now", **options: str
) -> None:
    """One availableNow run of a query (named ``name``) from the log into a Parquet sink."""
    reader = spark.readStream.format("aqueduct").option("log", str(log))
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (
        reader.load()
        .writeStream.queryName(name)
        .format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(QUERY_TIMEOUT), "query did not finish"
    assert q.exception() is None


def sink_rows(spark, out: Path) -> list[tuple]:
    df = spark.read.parquet(str(out))
    return sorted(
        (
            (r.stream_id, r.message_id, r.payload, r.epoch, r.stream_name, r.connector)
            for r in df.collect()
        ),
        key=_order,
    )


def _order(row: tuple) -> tuple:
    return (row[0], -1 if row[1] is None else row[1], row[2])


def test_exact_rows_reach_the_sink_and_the_listener_reports_commits(spark, tmp_path: Path) -> None:
    committed: list[dict[int, int]] = []
    commit_log_entries: list[int] = []
    fired = threading.Event()

    def on_committed(consumer: str, positions: dict[int, int]) -> None:
        assert consumer == "default"
        # Spark must have written the batch's commit log entry (and so the sink
        # committed it) before the listener hears of the batch.
        commit_log_entries.append(len(list((tmp_path / "ck" / "commits").glob("[0-9]*"))))
        committed.append(positions)
        fired.set()

    listener = install_commit_listener(spark, on_committed)
    listener.watch("listened", "default")
    try:
        with DurableLog(tmp_path / "log") as log:
            log.open_stream(1, "orders", "shop/a", boundaries=True)
            log.open_stream(2, "clicks", "web/b")
            for i in range(4):
                log.append(ConnectorMessage.build(1, b"o%d" % i, message_id=i, event_time=1_700_000_000_000_000 + i))
            log.append(ConnectorMessage.build(1, message_id=4, boundary=True))
            log.append(ConnectorMessage.build(1, b"open-epoch", message_id=5))
            log.append(ConnectorMessage.build(2, b"c0", message_id=7, key=b"k"))
            log.append(ConnectorMessage.build(2, b"eph"))  # EPHEMERAL: no message id
            log.commit()
            run_available_now(spark, log.path, tmp_path / "out", tmp_path / "ck", name="listened")
            rows = spark.read.parquet(str(tmp_path / "out")).collect()
            # the open epoch and the BOUNDARY marker are not rows
            assert sink_rows(spark, tmp_path / "out") == sorted(
                [(1, i, b"o%d" % i, 0, "orders", "shop/a") for i in range(4)]
                + [(2, 7, b"c0", 0, "clicks", "web/b"), (2, None, b"eph", 1, "clicks", "web/b")],
                key=_order,
            )
            by_payload = {r.payload: r for r in rows}
            assert by_payload[b"c0"].key == b"k" and by_payload[b"o0"].key is None
            assert by_payload[b"eph"].message_id is None
            assert by_payload[b"o1"].event_time.timestamp() == pytest.approx(1_700_000_000.000001)
            assert fired.wait(60), "listener never reported a commit"
            assert committed[-1] == {1: 5, 2: 2}
            assert commit_log_entries and all(n >= 1 for n in commit_log_entries)
            assert log.reference_at(1, 5) == 5 and log.reference_at(2, 2) == 8
            assert read_committed(log.path) in ({1: 5, 2: 2}, None)  # safety net lags
    finally:
        spark.streams.removeListener(listener)


def test_epochs_are_never_split_across_micro_batches(spark, tmp_path: Path) -> None:
    batches: list[list[tuple[int, int]]] = []
    with DurableLog(tmp_path / "log") as log:
        log.open_stream(1, "s", "c/1", boundaries=True)
        ids = iter(range(1000))
        for size in (2, 3, 6, 1, 1):  # with the limit at 4, the 7-record epoch goes alone
            for _ in range(size):
                log.append(ConnectorMessage.build(1, b"", message_id=next(ids)))
            log.append(ConnectorMessage.build(1, message_id=next(ids), boundary=True))
        log.commit()

    def collect(df, batch_id: int) -> None:
        batches.append([(r.epoch, r.message_id) for r in df.collect()])

    q = (
        spark.readStream.format("aqueduct")
        .option("log", str(tmp_path / "log"))
        .option("maxRecordsPerTrigger", "4")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(QUERY_TIMEOUT)
    epochs_per_batch = [sorted({e for e, _ in b}) for b in batches if b]
    assert epochs_per_batch == [[0], [1], [2], [3, 4]]
    sizes = [len(b) for b in batches if b]
    assert sizes == [2, 3, 6, 2]  # boundaries count toward the limit but are not rows


def test_restart_from_checkpoint_delivers_each_record_exactly_once(spark, tmp_path: Path) -> None:
    out, ck = tmp_path / "out", tmp_path / "ck"
    with DurableLog(tmp_path / "log") as log:
        log.open_stream(1, "s", "c/1")
        for i in range(5):
            log.append(ConnectorMessage.build(1, b"a%d" % i, message_id=i))
        log.commit()
        run_available_now(spark, log.path, out, ck)
        for i in range(5, 12):
            log.append(ConnectorMessage.build(1, b"a%d" % i, message_id=i))
        log.open_stream(2, "t", "c/1")
        log.append(ConnectorMessage.build(2, b"b0", message_id=0))
        log.commit()
        run_available_now(spark, log.path, out, ck)
        rows = [(s, m) for s, m, *_ in sink_rows(spark, out)]
        assert rows == [(1, i) for i in range(12)] + [(2, 0)]
        assert read_committed(log.path) is not None


def test_invalid_options_fail_the_load_with_a_clear_message(spark, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="maxRecordsPerTrigger must be a positive integer"):
        DurableLog(tmp_path / "log").close()
        (
            spark.readStream.format("aqueduct")
            .option("log", str(tmp_path / "log"))
            .option("maxRecordsPerTrigger", "-5")
            .load()
        )
    with pytest.raises(Exception, match="option 'log'"):
        spark.readStream.format("aqueduct").load()


def test_a_batch_replayed_after_a_failure_has_the_same_rows(spark, tmp_path: Path) -> None:
    """Spark re-runs a batch whose offsets it logged but never committed: same offsets, same rows."""
    ck = tmp_path / "ck"
    seen: dict[int, list[int]] = {}

    class SinkFailed(Exception):
        pass

    def failing(df, batch_id: int) -> None:
        seen[batch_id] = sorted(r.message_id for r in df.collect())
        if batch_id == 1:
            raise SinkFailed("sink down")

    rerun: list[int] = []

    def collecting(df, batch_id: int) -> None:
        rerun.append(batch_id)
        rows = sorted(r.message_id for r in df.collect())
        if batch_id in seen:
            assert rows == seen[batch_id], f"batch {batch_id} replayed differently"
        seen[batch_id] = rows

    def run(sink) -> object:
        return (
            spark.readStream.format("aqueduct")
            .option("log", str(tmp_path / "log"))
            .option("maxRecordsPerTrigger", "3")
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )

    with DurableLog(tmp_path / "log") as log:
        log.open_stream(1, "s", "c/1")
        for i in range(6):
            log.append(ConnectorMessage.build(1, b"", message_id=i))
        log.commit()
        q = run(failing)
        with pytest.raises(Exception, match="sink down"):
            q.awaitTermination(QUERY_TIMEOUT)
        first_attempt = dict(seen)
        assert first_attempt == {0: [0, 1, 2], 1: [3, 4, 5]}
        for i in range(6, 10):  # appended while the query is down
            log.append(ConnectorMessage.build(1, b"", message_id=i))
        log.commit()
        assert run(collecting).awaitTermination(QUERY_TIMEOUT)
    assert rerun[0] == 1 and seen[1] == first_attempt[1]  # the failed batch ran again, unchanged
    assert sorted(m for rows in seen.values() for m in rows) == list(range(10))
