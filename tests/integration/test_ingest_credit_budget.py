"""A shared credit budget over real TCP sessions and a real log: many producers, bounded credits.

40 producers share a budget of 100 credits (each could otherwise hold 64):
while they all send, the credits the sessions hold together never exceed
the budget plus one per session, and every message is stored once and acked.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aqueduct.bridge.ingest import Ingest, IngestConfig
from aqueduct.bridge.log import DurableLog
from aqueduct.connector.client import Connector
from aqueduct.connector.tcp import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig

TIMEOUT = 60.0
PRODUCERS = 40
MESSAGES = 50
BUDGET = 100


async def test_producers_share_the_budget_and_lose_nothing(tmp_path: Path) -> None:
    log = DurableLog(tmp_path / "log")
    ingest = Ingest(log, IngestConfig(credit_budget=BUDGET, session_credits=64))
    budget = ingest._budget
    assert budget is not None
    commits = asyncio.create_task(ingest.run())
    server = await serve_tcp("127.0.0.1", 0, ingest, WorkerConfig(initial_credits=0))
    peak = 0

    async def spark_and_watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, sum(budget.held.values()))
            ingest.on_committed({s: log.complete_offset(s) for s in log.stream_ids()})
            await asyncio.sleep(0.005)

    async def produce(i: int) -> None:
        async with Connector(f"tcp://127.0.0.1:{server.port}", program="b", instance=f"p{i}") as conn:
            stream = await conn.stream(i, f"s{i}")
            for n in range(MESSAGES):
                await stream.send(b"%d:%d" % (i, n))
            await conn.wait_all_acked(TIMEOUT)

    watcher = asyncio.create_task(spark_and_watch())
    try:
        await asyncio.wait_for(asyncio.gather(*(produce(i) for i in range(PRODUCERS))), TIMEOUT)
    finally:
        watcher.cancel()
        await server.close()
        commits.cancel()
        await asyncio.gather(watcher, commits, return_exceptions=True)
    try:
        assert 0 < peak <= BUDGET + PRODUCERS
        for i in range(PRODUCERS):
            assert (log.durable_end(i), log.durable_reference(i)) == (MESSAGES, MESSAGES)
        assert budget.held == {} and budget.free == BUDGET  # every session gave its credits back
    finally:
        log.close()
