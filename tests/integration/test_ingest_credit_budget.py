"""Shared budgets over real TCP sessions and a real log: many producers, bounded memory.

40 producers share a budget of 100 credits (each could otherwise hold 64):
while they all send, the credits the sessions hold together never exceed
the budget plus one per session, and every message is stored once, with its
bytes (read back from the log), and acked.
A budget in bytes does the same through the size of the records that
arrive: 4 KiB records under 40 KiB leave about ten credits to share.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from aqueduct.bridge.ingest.credit_budget import CreditBudget
from aqueduct.bridge.ingest.service import Ingest, IngestConfig
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.producer.client import Connector
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig
from tests.stored import stored

TIMEOUT = 60.0


async def _run_fleet(
    log: DurableLog,
    config: IngestConfig,
    producers: int,
    messages: int,
    payload: Callable[[int, int], bytes],
    watch: Callable[[CreditBudget], None],
) -> CreditBudget:
    """Every producer sends its messages and waits for their acks; ``watch`` sees the budget meanwhile."""
    ingest = Ingest(log, config)
    budget = ingest.credits.budget
    assert budget is not None
    commits = asyncio.create_task(ingest.run())
    server = await serve_tcp("127.0.0.1", 0, ingest, WorkerConfig(initial_credits=0))

    async def spark_and_watch() -> None:
        while True:
            watch(budget)
            ingest.on_committed({s: log.complete_offset(s) for s in log.stream_ids()})
            await asyncio.sleep(0.005)

    async def produce(i: int) -> None:
        async with Connector(f"tcp://127.0.0.1:{server.port}", program="b", instance=f"p{i}") as conn:
            stream = await conn.stream(i, f"s{i}")
            for n in range(messages):
                await stream.send(payload(i, n))
            await conn.wait_all_acked(TIMEOUT)

    watcher = asyncio.create_task(spark_and_watch())
    try:
        await asyncio.wait_for(asyncio.gather(*(produce(i) for i in range(producers))), TIMEOUT)
    finally:
        watcher.cancel()
        await server.close()
        commits.cancel()
        await asyncio.gather(watcher, commits, return_exceptions=True)
    for i in range(producers):  # read back: every id once, with the bytes its producer sent
        assert stored(log, i) == [(n, payload(i, n)) for n in range(messages)]
    assert budget.held == {} and budget.free == budget.total  # every session gave its credits back
    return budget


async def test_producers_share_the_budget_and_lose_nothing(tmp_path: Path) -> None:
    producers, budget_credits = 40, 100
    peak = 0

    def watch(budget: CreditBudget) -> None:
        nonlocal peak
        peak = max(peak, sum(budget.held.values()))

    with DurableLog(tmp_path / "log") as log:
        budget = await _run_fleet(
            log, IngestConfig(credit_budget=budget_credits, session_credits=64), producers, 50,
            lambda i, n: b"%d:%d" % (i, n), watch,
        )
    assert 0 < peak <= budget_credits + producers
    assert budget.total == budget_credits


async def test_a_memory_budget_bounds_the_bytes_in_flight_by_the_records_size(tmp_path: Path) -> None:
    producers, record_bytes, memory_budget = 8, 4096, 40 * 1024
    settled_peak = 0  # credits held once the pool follows the real record size

    def watch(budget: CreditBudget) -> None:
        nonlocal settled_peak
        if budget.total <= 2 * memory_budget // record_bytes:
            settled_peak = max(settled_peak, sum(budget.held.values()))

    with DurableLog(tmp_path / "log") as log:
        budget = await _run_fleet(
            log, IngestConfig(memory_budget=memory_budget, session_credits=64), producers, 60,
            lambda i, n: bytes([i]) * record_bytes, watch,
        )
    # 40 KiB of 4 KiB records: ten credits, not the 40 the 1 KiB first guess gave
    assert budget.total == memory_budget // record_bytes
    assert 0 < settled_peak * record_bytes <= 2 * memory_budget + producers * record_bytes
