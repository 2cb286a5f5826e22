"""The ``SparkBridge`` inside a user's own Spark application, with real Spark.

The user's query here is what a data engineer writes: JSON payloads parsed
with ``from_json``, written through ``foreachBatch`` to files of their own.
The bridge runs in this process (the test session's SparkSession), the
producers are connector clients over loopback TCP.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.functions import col, from_json
from pyspark.sql.types import DoubleType, StringType, StructField, StructType

from aqueduct.bridge import SparkBridge, SparkBridgeError
from aqueduct.bridge.app.drain import IN_A_SPARK_JOB
from aqueduct.bridge.storage.consumers import ConsumerError, load_consumers
from aqueduct.bridge.storage.view import load_streams
from aqueduct.connector.errors import TlsRefused
from aqueduct.connector.producer.client import Connector
from tests.integration.test_cli_errors import command
from tests.waiting import finish

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TIMEOUT = 120.0  # only turns a hang into a failure
SCHEMA = StructType([StructField("user", StringType()), StructField("amount", DoubleType())])


def parsed(bridge: SparkBridge, consumer: str = "default", **options: Any) -> Any:
    """The user's parsing: JSON payloads to columns, non-JSON dropped."""
    return (
        bridge.stream(consumer, **options)
        .select("stream_id", "message_id", from_json(col("payload").cast("string"), SCHEMA).alias("e"))
        .where(col("e.user").isNotNull())
        .select("stream_id", "message_id", "e.user", "e.amount")
    )


class BatchFiles:
    """An idempotent ``foreachBatch`` sink: one file per batch id, replaced whole.

    ``gate``, while cleared, holds each batch inside the sink (after it read
    its rows, before it wrote them): the query cannot commit meanwhile.
    """

    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        rows = [r.asDict() for r in batch_df.orderBy("stream_id", "message_id").collect()]
        if rows:
            self.entered.set()
            assert self.gate.wait(TIMEOUT)
        tmp = self.out / f".{batch_id}.tmp"
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, self.out / f"{batch_id:08d}.json")

    def rows(self) -> list[dict]:
        return [r for p in sorted(self.out.glob("*.json")) for r in json.loads(p.read_text())]


def start(df: Any, sink: BatchFiles, checkpoint: Path) -> Any:
    return (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0.3 seconds")
        .start()
    )


@pytest.fixture
def stop_queries(spark: Any) -> Iterator[None]:
    yield
    for q in spark.streams.active:
        q.stop()


async def send_events(conn: Connector, stream_id: int, users: list[str], epoch: int = 5) -> Any:
    """Each user as a JSON event, a BOUNDARY every ``epoch``, one non-JSON payload; the stream."""
    s = await conn.stream(stream_id, f"events-{stream_id}")
    await send_users(s, users, epoch)
    await s.send(b"not json: dropped by the user's filter")
    await s.send(None, boundary=True)
    return s


async def send_users(s: Any, users: list[str], epoch: int = 5) -> None:
    for i, user in enumerate(users):
        await s.send(json.dumps({"user": user, "amount": float(i)}).encode())
        if (i + 1) % epoch == 0:
            await s.send(None, boundary=True)


async def until(predicate: Any, what: str) -> None:
    for _ in range(int(TIMEOUT / 0.1)):
        if predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def test_own_foreach_batch_pipeline_gets_every_message_once_and_acks_follow_its_commit(
    spark: Any, tmp_path: Path, stop_queries: None
) -> None:
    sink = BatchFiles(tmp_path / "out")
    sink.gate.clear()  # the first batch with rows waits inside the sink
    users = [f"u{i}" for i in range(40)]
    bridge = SparkBridge(spark, tmp_path / "log", tcp=("127.0.0.1", 0))
    await asyncio.to_thread(bridge.start)
    try:
        query = start(parsed(bridge), sink, tmp_path / "ck")
        bridge.ack_after(query)
        assert await asyncio.to_thread(bridge.await_termination, 0.3) is False  # running: the timeout ends the wait
        url = f"tcp://127.0.0.1:{bridge.tcp_address[1]}"
        async with Connector(url, program="shop", instance="a") as conn:
            stream = await send_events(conn, 1, users)
            await until(sink.entered.is_set, "a batch inside the user's sink")
            # Durable in the log, read by Spark, being written: not committed, so not acked.
            assert stream.acked == 0 and stream.unacked
            assert bridge.progress().durable_records > 0
            sink.gate.set()
            await conn.wait_all_acked(TIMEOUT)
            # A bridge inside a job does not drain: the operator is told so at once, the bridge serves on.
            asked = await asyncio.create_subprocess_exec(
                *command("aqueduct-bridge"), "drain", "--log", str(tmp_path / "log"),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            code, stdout, stderr = await finish(asked, TIMEOUT)
            assert (code, stdout, stderr.splitlines()) == (1, b"", [f"aqueduct-bridge drain: {IN_A_SPARK_JOB}"])
            assert conn.connected and query.isActive
        rows = sink.rows()
        assert [r["user"] for r in rows] == users  # each once, in order
        assert len({r["message_id"] for r in rows}) == len(users)
    finally:
        await asyncio.to_thread(bridge.stop)
    assert not query.isActive  # leaving the bridge stops the queries that drive its acks
    assert load_consumers(tmp_path / "log")["default"].acks


async def _stopped_inside_a_batch(
    spark: Any, tmp_path: Path, caplog: Any, stop: Callable[[SparkBridge], None], why: str
) -> None:
    """A batch held inside the user's sink when the bridge stops: ``stop`` must end it there, with one warning.

    The sink is let go once the warning is logged (Spark's ``query.stop()``
    waits for its stream thread, which waits for the Python function).
    """
    sink = BatchFiles(tmp_path / "out")
    sink.gate.clear()
    bridge = SparkBridge(spark, tmp_path / "log", tcp=("127.0.0.1", 0))
    await asyncio.to_thread(bridge.start)
    query = start(parsed(bridge), sink, tmp_path / "ck")
    bridge.ack_after(query)
    warned = f"still in a micro-batch {why}: stopping it there"

    def let_go_once_warned() -> None:
        for _ in range(int(TIMEOUT / 0.05)):
            if warned in caplog.text:
                break
            time.sleep(0.05)
        sink.gate.set()

    async with Connector(f"tcp://127.0.0.1:{bridge.tcp_address[1]}", program="shop", instance="a") as conn:
        stream = await send_events(conn, 1, [f"u{i}" for i in range(10)])
        await until(sink.entered.is_set, "a batch inside the user's sink")
        helper = threading.Thread(target=let_go_once_warned)
        helper.start()
        try:
            with caplog.at_level(logging.WARNING, logger="aqueduct.bridge.app.query_stop"):
                stop(bridge)
        finally:
            sink.gate.set()
            helper.join(TIMEOUT)
        assert stream.acked == 0  # the batch did not commit before the bridge stopped taking records
    assert caplog.text.count(warned) == 1
    assert not query.isActive


async def test_a_query_still_inside_a_batch_after_the_grace_is_stopped_there_with_one_warning(
    spark: Any, tmp_path: Path, stop_queries: None, caplog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("aqueduct.bridge.app.spark_bridge.STOP_GRACE", 0.5)
    await _stopped_inside_a_batch(spark, tmp_path, caplog, SparkBridge.stop, "at the end of the stop's grace")


async def test_a_second_ctrl_c_during_the_grace_stops_the_query_at_once(
    spark: Any, tmp_path: Path, stop_queries: None, caplog: Any
) -> None:
    """On the main thread, as a script's ``with`` block: SIGINT during the grace cuts it short, no KeyboardInterrupt."""
    before = signal.getsignal(signal.SIGINT)

    def stop_and_press_ctrl_c(bridge: SparkBridge) -> None:
        def press() -> None:
            for _ in range(int(TIMEOUT / 0.01)):  # once the stop listens for it
                if signal.getsignal(signal.SIGINT) is not before:
                    os.kill(os.getpid(), signal.SIGINT)
                    return
                time.sleep(0.01)

        presser = threading.Thread(target=press)
        presser.start()
        bridge.stop()  # the grace is 10 s: the press ends it
        presser.join(TIMEOUT)

    await _stopped_inside_a_batch(spark, tmp_path, caplog, stop_and_press_ctrl_c, "at a second stop request")
    assert signal.getsignal(signal.SIGINT) is before  # put back


async def test_two_consumers_truncation_follows_the_slower_and_a_late_one_starts_at_the_latest_epoch(
    spark: Any, tmp_path: Path, stop_queries: None
) -> None:
    fast, slow, late = (BatchFiles(tmp_path / n) for n in ("fast", "slow", "late"))
    slow.gate.clear()
    bridge = SparkBridge(spark, tmp_path / "log", tcp=("127.0.0.1", 0), segment_bytes=512)
    await asyncio.to_thread(bridge.start)
    try:
        q_fast = start(parsed(bridge, "fast"), fast, tmp_path / "ck-fast")
        start(parsed(bridge, "slow"), slow, tmp_path / "ck-slow")
        bridge.ack_after(q_fast, consumer="fast")  # only the fast query's sink releases acks
        url = f"tcp://127.0.0.1:{bridge.tcp_address[1]}"
        first = [f"a{i}" for i in range(60)]
        async with Connector(url, program="shop", instance="a") as conn:
            s1 = await conn.stream(1, "events-1")
            for part in range(3):  # three group commits: three segments of stream 1
                await send_users(s1, first[part * 20 : part * 20 + 20])
                await conn.wait_all_acked(TIMEOUT)  # the slow consumer does not hold producers back
            # ... but it holds the log: nothing it has not committed is truncated.
            assert load_streams(tmp_path / "log")[1].earliest == 0
            assert slow.entered.is_set() or not slow.rows()

            # A consumer joining now at the latest epoch end sees only what comes after.
            q_late = start(parsed(bridge, "late", starting="latest"), late, tmp_path / "ck-late")
            await until(lambda: q_late.lastProgress is not None, "the late query's first batch")
            second = [f"b{i}" for i in range(10)]
            await send_events(conn, 2, second)
            await conn.wait_all_acked(TIMEOUT)
            slow.gate.set()
            await until(lambda: len(slow.rows()) == 70, "the slow consumer catching up")
            await until(lambda: len(late.rows()) == 10, "the late consumer's rows")
            # Every consumer is past the first segments now: truncation moves on.
            await until(lambda: load_streams(tmp_path / "log")[1].earliest > 0, "truncation")
        assert [r["user"] for r in fast.rows()] == first + second
        assert [r["user"] for r in slow.rows()] == first + second
        assert [r["user"] for r in late.rows()] == second
        q_fast.stop()  # the query driving acks ended: the wait is over at once
        assert await asyncio.to_thread(bridge.await_termination) is True
    finally:
        await asyncio.to_thread(bridge.stop)
    consumers = load_consumers(tmp_path / "log")
    assert sorted(consumers) == ["fast", "late", "slow"]
    assert [c.name for c in consumers.values() if c.acks] == ["fast"]


async def test_a_consumer_too_far_behind_is_dropped_stops_pinning_the_log_and_its_query_fails(
    spark: Any, tmp_path: Path, stop_queries: None
) -> None:
    main, audit = BatchFiles(tmp_path / "main"), BatchFiles(tmp_path / "audit")
    audit.gate.clear()  # the audit query hangs in its sink: it falls behind
    bridge = SparkBridge(spark, tmp_path / "log", tcp=("127.0.0.1", 0), segment_bytes=512, max_consumer_lag=20)
    await asyncio.to_thread(bridge.start)
    try:
        bridge.ack_after(start(parsed(bridge), main, tmp_path / "ck-main"))
        q_audit = start(parsed(bridge, "audit"), audit, tmp_path / "ck-audit")
        users = [f"a{i}" for i in range(60)]
        async with Connector(f"tcp://127.0.0.1:{bridge.tcp_address[1]}", program="shop", instance="a") as conn:
            s1 = await conn.stream(1, "events-1")
            for part in range(3):
                await send_users(s1, users[part * 20 : part * 20 + 20])
                await conn.wait_all_acked(TIMEOUT)
            await until(lambda: load_consumers(tmp_path / "log")["audit"].dropped is not None, "the drop")
            # Dropped, it no longer holds the log: truncation follows the main query alone.
            await until(lambda: load_streams(tmp_path / "log")[1].earliest > 0, "truncation")
        assert "more than max_consumer_lag 20" in str(load_consumers(tmp_path / "log")["audit"].dropped)
        audit.gate.set()
        await until(lambda: not q_audit.isActive, "the audit query to fail")
        assert "consumer 'audit' was dropped" in str(q_audit.exception())
        assert [r["user"] for r in main.rows()] == users
    finally:
        await asyncio.to_thread(bridge.stop)


async def test_misuse_is_refused_with_a_clear_error(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="give quic=, tcp= and/or wallaroo_tcp= HOST:PORT"):
        SparkBridge(spark, tmp_path / "log")
    with pytest.raises(ValueError, match="expected HOST:PORT, got 'nowhere'"):
        SparkBridge(spark, tmp_path / "log", tcp="nowhere")
    with pytest.raises(TypeError, match="unknown setting"):
        SparkBridge(spark, tmp_path / "log", tcp="127.0.0.1:0", sink="parquet")
    bridge = SparkBridge(spark, tmp_path / "log", tcp="127.0.0.1:0")
    with pytest.raises(SparkBridgeError, match="start the bridge first"):
        bridge.stream()
    await asyncio.to_thread(bridge.start)
    try:
        with pytest.raises(SparkBridgeError, match="hand a query to ack_after first"):
            bridge.await_termination()
        with pytest.raises(ConsumerError, match="consumer name must be"):
            bridge.stream("no/slashes")
        with pytest.raises(ValueError, match="starting must be one of"):
            bridge.stream(starting="middle")
        bridge.stream("a")
        with pytest.raises(SparkBridgeError, match="already has a stream"):
            bridge.stream("a")
        bridge.stream("b")
        with pytest.raises(SparkBridgeError, match="name the consumer"):
            bridge.ack_after(object())
        with pytest.raises(SparkBridgeError, match="no stream of consumer 'c'"):
            bridge.ack_after(object(), consumer="c")
        # A second bridge on the same log is refused, and the first goes on.
        with pytest.raises(ValueError, match=f"log= {tmp_path / 'log'}: held by process {os.getpid()}, its one writer"):
            SparkBridge(spark, tmp_path / "log", tcp="127.0.0.1:0")
        assert bridge.progress().sessions == 0
    finally:
        await asyncio.to_thread(bridge.stop)


async def test_a_spark_bridge_with_a_client_ca_admits_only_certificate_holders(spark: Any, tmp_path: Path, certs) -> None:
    bridge = SparkBridge(spark, tmp_path / "log", quic="127.0.0.1:0", certfile=certs.server_cert, keyfile=certs.server_key,
                  client_cafile=certs.ca)  # fmt: skip
    await asyncio.to_thread(bridge.start)
    try:
        url = f"aqueduct://127.0.0.1:{bridge.quic_address[1]}"
        stranger = Connector(url, program="stranger", cafile=str(certs.ca), connect_timeout=2.0)
        with pytest.raises(TlsRefused, match="it presented no certificate \\(mutual TLS requires one\\)"):  # refused at once, not retried
            await stranger.connect()
        await stranger.close()
        async with Connector(url, program="member", cafile=str(certs.ca), certfile=str(certs.client_cert),
                             keyfile=str(certs.client_key), connect_timeout=TIMEOUT) as conn:  # fmt: skip
            stream = await conn.stream(1, "orders")
            await stream.send(b'{"user": "ada", "amount": 1}')
            for _ in range(int(TIMEOUT / 0.1)):  # durable in the bridge's log
                if bridge.progress().durable_records:
                    break
                await asyncio.sleep(0.1)
        assert bridge.progress().durable_records == 1
    finally:
        await asyncio.to_thread(bridge.stop)
