"""A user's failover query under a real local Spark over two ingest-only bridges: one stream, exactly once.

A producer writes a stream to bridge 1, then (as a producer that moved
would) resends it to bridge 2 with the same message ids and goes on
there. The query reads both bridges over Flight with ``failover=true``:
every ``(stream id, message id)`` reaches the sink once with its payload,
both bridges get the query's commit (their commit files), and the
producer's records are acked by both.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from aqueduct.bridge.app.service import Bridge, BridgeConfig
from aqueduct.bridge.storage.commits import read_committed
from aqueduct.connector.producer.client import Connector

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TIMEOUT = 240.0  # seconds; only turns a hang into a failure


class Loop:
    """An event loop in a thread, where the bridges and the producer run while Spark reads."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro):  # noqa: ANN001, ANN201 - any coroutine
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(TIMEOUT)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(TIMEOUT)


@pytest.fixture
def loop() -> Iterator[Loop]:
    lp = Loop()
    yield lp
    lp.close()


async def durable(bridge: Bridge, sid: int, records: int) -> None:
    for _ in range(int(TIMEOUT / 0.05)):
        if bridge.log is not None and sid in bridge.log.stream_ids() and bridge.log.complete_offset(sid) >= records:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"stream {sid} never held {records} complete records")


async def send(conn: Connector, first: int, last: int) -> None:
    """Payloads ``m<first>..m<last - 1>`` then a BOUNDARY, on stream 1 (ids follow the stream's point)."""
    stream = await conn.stream(1, "moved")
    for i in range(first, last):
        await stream.send(b"m%d" % i)
    await stream.send(None, boundary=True)


def test_a_stream_moved_between_bridges_reaches_the_sink_once(spark, loop: Loop, tmp_path: Path) -> None:
    bridges = [
        Bridge(BridgeConfig(log_dir=tmp_path / f"log{n}", tcp=("127.0.0.1", 0), ingest_only=True)) for n in (1, 2)
    ]
    conns: list[Connector] = []
    try:
        for b in bridges:
            loop.run(b.start(run_query=False))

        async def produce() -> None:
            one, two = (Connector(f"tcp://127.0.0.1:{b.tcp_address[1]}", program="p", instance="i") for b in bridges)
            conns.extend([one, two])
            await one.connect()
            await send(one, 0, 10)  # ids 0..9, BOUNDARY 10 on bridge 1
            await durable(bridges[0], 1, 11)
            await two.connect()
            await send(two, 0, 10)  # moved: the same records resent to bridge 2 (ids 0..10) ...
            await send(two, 10, 20)  # ... and it goes on there: ids 11..20, BOUNDARY 21
            await durable(bridges[1], 1, 22)

        loop.run(produce())
        opts = [b.source_options() for b in bridges]
        reader = spark.readStream.format("aqueduct").option("failover", "true").option("consumer", "default")
        for key in ("bridge", "bridgeTokenFile", "bridgeCA"):
            reader = reader.option(key, ",".join(f"b{n}={o[key]}" for n, o in enumerate(opts, 1)))
        q = (
            reader.load()
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            for c in conns:  # each bridge acks its producer: the query's commit reached both
                loop.run(c.wait_all_acked(TIMEOUT))
        finally:
            q.stop()
        assert q.exception() is None
        for b in bridges:
            assert read_committed(b.config.log_dir, "default") is not None
        out = spark.read.parquet(str(tmp_path / "out"))
        assert "log" not in out.columns
        got = sorted((r.stream_id, r.message_id, r.payload) for r in out.collect())
        ids = [*range(0, 10), *range(11, 21)]  # the BOUNDARY records (10, 21) are no rows
        assert got == [(1, mid, b"m%d" % (mid if mid < 10 else mid - 1)) for mid in ids]
    finally:
        for c in conns:
            loop.run(c.close())
        for b in bridges:
            loop.run(b.stop())
