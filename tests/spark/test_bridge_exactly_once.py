"""The bridge end to end with real Spark: producers -> TCP/QUIC -> log -> Spark -> Parquet.

Each test runs a :class:`Bridge` in this process on the shared session
fixture, producers as connector clients over loopback, and checks the
Parquet output through Spark's sink metadata log (only committed files
count) with :func:`verify_output`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from aqueduct.bridge.app.service import Bridge, BridgeConfig
from aqueduct.bridge.app.status import read_status
from demo.producer import produce
from demo.run import DemoConfig, demo
from demo.verify import verify_output
from demo.workload import Workload

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TIMEOUT = 120.0  # generous: only there to turn a hang into a failure


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(tmp: Path, port: int = 0, **overrides: Any) -> BridgeConfig:
    settings: dict[str, Any] = {"trigger_interval": 0.5, **overrides}
    return BridgeConfig(log_dir=tmp / "log", tcp=("127.0.0.1", port), output_dir=tmp / "out", **settings)


@contextlib.asynccontextmanager
async def running(cfg: BridgeConfig, spark: Any) -> AsyncIterator[Bridge]:
    bridge = Bridge(cfg, spark=spark)
    await bridge.start()
    try:
        yield bridge
    finally:
        await bridge.stop()
    assert bridge.failed is None


def url(bridge: Bridge) -> str:
    assert bridge.tcp_address is not None
    return f"tcp://127.0.0.1:{bridge.tcp_address[1]}"


async def produce_all(address: str, workload: Workload) -> None:
    await asyncio.wait_for(
        asyncio.gather(*(produce(address, workload, p) for p in range(workload.producers))),
        TIMEOUT,
    )


async def test_records_from_several_connectors_land_in_parquet_exactly_once(
    spark: Any, tmp_path: Path
) -> None:
    workload = Workload(producers=3, streams=2, events=1500, epoch=100)
    async with running(config(tmp_path), spark) as bridge:
        await produce_all(url(bridge), workload)
        assert bridge.progress().lag == 0  # every producer saw its last ACK: all committed
    result = verify_output(tmp_path / "out", workload.expected())
    assert result.ok, result.problems()
    assert result.rows == 4500 and result.streams == 6
    status = read_status(tmp_path / "log")  # what `aqueduct-bridge status` shows
    assert status["total_lag"] == 0 and len(status["streams"]) == 6


async def test_restarting_the_query_from_its_checkpoint_is_exactly_once(
    spark: Any, tmp_path: Path
) -> None:
    workload = Workload(producers=2, streams=2, events=3000, epoch=50)
    # Few credits and a small lag bound pace the producers: the stop is mid-stream.
    cfg = config(tmp_path, port=free_port(), max_lag=500, credits=256)
    producers: asyncio.Task | None = None
    try:
        async with running(cfg, spark) as first:
            producers = asyncio.create_task(produce_all(url(first), workload))
            for _ in range(int(TIMEOUT / 0.1)):
                if first.progress().batches >= 2:
                    break
                await asyncio.sleep(0.1)
        # the first bridge stopped its query: producers lost their connections
        assert not producers.done()
        async with running(cfg, spark) as second:  # same log, checkpoint and port: producers reconnect
            await producers
            await second.drained(TIMEOUT)
    finally:
        if producers is not None and not producers.done():
            producers.cancel()
    result = verify_output(tmp_path / "out", workload.expected())
    assert result.ok, result.problems()


async def test_a_micro_batch_never_holds_part_of_an_epoch(spark: Any, tmp_path: Path) -> None:
    workload = Workload(producers=1, streams=2, events=300, epoch=10)
    async with running(config(tmp_path, max_records_per_trigger=45), spark) as bridge:
        await produce_all(url(bridge), workload)
        batches = bridge.progress().batches
    result = verify_output(tmp_path / "out", workload.expected())
    assert result.ok, result.problems()
    assert result.split_epochs == 0
    # 330 records (2 x (150 messages + 15 boundaries)) in whole epochs of 11, <= 45 per batch
    assert workload.records == 330
    assert batches >= 330 // 45 and result.batches == batches


async def test_a_producer_faster_than_spark_is_slowed_with_bounded_bridge_memory(
    spark: Any, tmp_path: Path
) -> None:
    credits, max_lag = 16, 200
    workload = Workload(producers=1, streams=1, events=1200, epoch=10)
    cfg = config(tmp_path, credits=credits, max_lag=max_lag)
    async with running(cfg, spark) as bridge:
        producer = asyncio.create_task(produce_all(url(bridge), workload))
        peak_lag = peak_buffered = 0
        withheld_seen = False
        while not producer.done():
            assert bridge.ingest is not None
            peak_lag = max(peak_lag, bridge.ingest.lag)
            peak_buffered = max(peak_buffered, bridge.ingest.buffered)
            withheld_seen |= bridge.ingest.counters.withheld_credits > 0
            await asyncio.sleep(0.02)
        await producer
    # The producer was held back (Spark commits twice a second; it could send far faster) ...
    assert withheld_seen
    # ... and what the bridge holds stayed bounded by the configuration, not the workload:
    # durable-but-unconsumed records by max_lag plus the credits in flight when the tap
    # closed, records in memory by the credits.
    assert peak_lag <= max_lag + 2 * credits
    assert peak_buffered <= credits
    result = verify_output(tmp_path / "out", workload.expected())
    assert result.ok, result.problems()


async def test_the_demo_command_passes(spark: Any, tmp_path: Path) -> None:
    cfg = DemoConfig(producers=2, events=1000, streams=2, epoch=50, keep=tmp_path, timeout=TIMEOUT)
    status = io.StringIO()
    summary = await demo(cfg, tmp_path, status, spark=spark)
    assert summary["ok"], (summary["problems"], status.getvalue())
    assert summary["verification"]["rows"] == 2000
    assert summary["producer_exit_codes"] == [0, 0]
    assert "producers running" in status.getvalue()  # the progress display ran


async def test_a_shared_credit_budget_holds_in_flight_frames_and_stays_exactly_once(
    spark: Any, tmp_path: Path
) -> None:
    """``--credit-budget`` through a running bridge with Spark: bounded in flight, nothing lost."""
    budget = 60
    workload = Workload(producers=4, streams=2, events=600, epoch=20)
    async with running(config(tmp_path, credit_budget=budget, credits=256), spark) as bridge:
        producers = asyncio.create_task(produce_all(url(bridge), workload))
        peak_in_flight = 0
        while not producers.done():
            assert bridge.ingest is not None and bridge.ingest.credits.budget is not None
            held = bridge.ingest.credits.budget.total - bridge.ingest.credits.budget.free
            peak_in_flight = max(peak_in_flight, held)
            await asyncio.sleep(0.005)
        await producers
        await bridge.drained(TIMEOUT)
    # Every session holds at least one credit, so the total may pass the budget by one per session.
    assert 0 < peak_in_flight <= budget + workload.producers
    result = verify_output(tmp_path / "out", workload.expected())
    assert result.ok, result.problems()
