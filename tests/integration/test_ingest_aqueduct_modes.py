"""The ingest learns each stream's delivery mode from its Aqueduct channel.

An UNORDERED stream's point of reference is the end of its contiguous ids
(spec: its ids are consecutive), an ORDERED one's is its last id + 1; the log
must be told which, or it would treat a late lower id as a duplicate.
"""

from __future__ import annotations

import asyncio

from aqueduct.bridge.ingest.service import Ingest, IngestConfig
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector import ORDERED, UNORDERED
from aqueduct.connector.producer.client import Connector
from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct
from aqueduct.wire.modes import Mode
from tests.ingest_stop import stop_ingest

TIMEOUT = 30.0


async def test_unordered_and_ordered_streams_reach_the_log_with_their_mode(
    tmp_path, certs, server_backend, server_host, client_backend
) -> None:
    log = DurableLog(tmp_path / "log")
    ingest = Ingest(log, IngestConfig())
    commits = asyncio.create_task(ingest.run())
    server = await serve_aqueduct(
        server_host, 0, ingest, certfile=certs.server_cert, keyfile=certs.server_key, backend=server_backend
    )
    try:
        url = f"aqueduct://127.0.0.1:{server.port}"
        async with Connector(url, program="p", instance="i", cafile=certs.ca, quic_backend=client_backend) as conn:
            fast = await conn.stream(1, "unordered", mode=UNORDERED)
            slow = await conn.stream(2, "ordered", mode=ORDERED)
            for n in range(200):
                await fast.send(b"u%d" % n)
                await slow.send(b"o%d" % n)

            async def durable() -> None:
                while not (
                    {1, 2} <= set(log.stream_ids())
                    and (log.durable_reference(1), log.durable_reference(2)) == (200, 200)
                ):
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(durable(), TIMEOUT)
        assert log.snapshot(1).meta.mode is Mode.UNORDERED
        assert log.snapshot(2).meta.mode is Mode.ORDERED
    finally:
        await stop_ingest(server, commits, log)
