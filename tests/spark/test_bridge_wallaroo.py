"""A Wallaroo v3 connector feeds Spark through the bridge exactly once, across a bridge restart.

The connector is the spec-page client of tests/wallaroo_client.py (it acts as
Wallaroo's released one: waits for NOTIFY_ACK, spends credits, reconnects and
resumes from NOTIFY_ACK's point). The bridge runs in this process on the
shared Spark session, listening with ``wallaroo_tcp`` only.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from aqueduct.bridge.app.service import Bridge, BridgeConfig
from demo.sinkfiles import read_committed
from demo.verify import verify_output
from tests.wallaroo_client import EVENT_TIME_BASE, WallarooSource, payload

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TIMEOUT = 120.0  # only there to turn a hang into a failure


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_wallaroo_connector_feeds_spark_exactly_once_across_a_bridge_restart(
    spark: Any, tmp_path: Path
) -> None:
    streams, count = {11: "sensors/a", 12: "sensors/b"}, 1500
    # Few credits and a small lag bound pace the connector: the stop is mid-stream.
    cfg = BridgeConfig(
        log_dir=tmp_path / "log",
        wallaroo_tcp=("127.0.0.1", free_port()),
        output_dir=tmp_path / "out",
        trigger_interval=0.5,
        credits=64,
        max_lag=400,
    )
    first, second = Bridge(cfg, spark=spark), Bridge(cfg, spark=spark)  # the second: same log, checkpoint, port
    source = WallarooSource(cfg.wallaroo_tcp[1], streams, count, timeout=TIMEOUT)
    client: asyncio.Task | None = None
    try:
        try:
            await first.start()
            assert first.wallaroo_address == cfg.wallaroo_tcp and first.tcp_address is None
            client = asyncio.create_task(source.run())
            for _ in range(int(TIMEOUT / 0.1)):
                if first.progress().batches >= 2:
                    break
                await asyncio.sleep(0.1)
        finally:
            await first.stop()  # the connector loses its connection and retries
        assert first.failed is None and not client.done()
        try:
            await second.start()
            stats = await asyncio.wait_for(client, TIMEOUT)
            await second.drained(TIMEOUT)
        finally:
            await second.stop()
    finally:
        if client is not None and not client.done():
            client.cancel()
    assert second.failed is None
    assert stats.connections >= 2 and len(stats.resumed_from) >= 2
    assert all(point < count for point in stats.resumed_from[-1].values()), stats  # mid-stream

    result = verify_output(tmp_path / "out", {sid: {m: payload(sid, m) for m in range(count)} for sid in streams})
    assert result.ok, result.problems()
    table = read_committed(tmp_path / "out")
    assert table is not None
    rows = table.select(["stream_id", "message_id", "payload", "key"]).to_pylist()
    # Microseconds since the epoch (Parquet may hand the column back in another unit).
    micros = table["event_time"].cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
    for row, event_time in zip(rows, micros, strict=True):
        sid, mid = row["stream_id"], row["message_id"]
        assert row["payload"] == payload(sid, mid)
        assert row["key"] == f"k{mid % 4}".encode()
        assert event_time == EVENT_TIME_BASE + mid
