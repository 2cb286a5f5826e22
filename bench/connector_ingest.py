"""Connector ingest: 100-byte records from a ``Connector`` into the bridge's durable log.

The server side is the bridge's real ingest path (``Ingest`` over a
``DurableLog`` in a temporary directory, group commit with fsync) behind the
connector listener of the role's transport: ``aqueduct`` (QUIC) or ``tcp``.
There is no Spark here: the sink commits everything the moment it is durable
(an infinitely fast Spark), so producers get ACKs and the bridge's backlog
bound never engages; the rate is what the ingest itself sustains. A record
counts when the group commit holding it returned, i.e. when it is durable.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aqueduct.bridge.ingest.service import Ingest, IngestConfig
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.events import SessionEnded, WorkerEvent
from aqueduct.connector.producer.client import DEFAULT_MAX_BUFFER, Connector
from aqueduct.connector.worker.server import WorkerPeer
from aqueduct.connector.worker_session import WorkerConfig
from bench.common import Certs, Meter, listen_host, payload, run_until_idle, send_for

STREAM_ID = 1


class MeteredIngest(Ingest):
    """The bridge's ingest, plus: count records as they become durable, commit downstream at once."""

    def __init__(self, durable_log: DurableLog, meter: Meter, size: int) -> None:
        super().__init__(durable_log, IngestConfig())
        self.meter = meter
        self.size = size
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._durable = 0
        self.group_commits = 0  # group commits that made records durable

    async def group_commit(self) -> None:  # type: ignore[override]
        await super().group_commit()
        # The log's durable ends, not the ingest's counters: records that
        # arrived while this group was being written wait for the next one.
        # (The producer sends no BOUNDARY markers, so every record is data.)
        positions = {sid: self.log.durable_end(sid) for sid in self.log.stream_ids()}
        fresh = sum(positions.values()) - self._durable
        if fresh:
            self.group_commits += 1
            self._durable += fresh
            self.meter.add(fresh, fresh * self.size)
        self.on_committed(positions)

    async def handle(self, peer: WorkerPeer, event: WorkerEvent) -> None:
        await super().handle(peer, event)
        if isinstance(event, SessionEnded) and not self.ended.done():
            await self.group_commit()
            self.ended.set_result(None)


async def _serve(
    params: dict[str, Any], certs: Certs, ready: Callable[[int], None], transport: str
) -> dict[str, Any]:
    meter = Meter(params["warmup"])
    with tempfile.TemporaryDirectory(prefix="aqueduct-bench-log-") as tmp:
        log = DurableLog(Path(tmp) / "log")
        ingest = MeteredIngest(log, meter, params["size"])
        committer = asyncio.ensure_future(ingest.run())
        # A producer sends as far as its credits reach, then waits for the
        # group commit that earns more: the credits bound the rate per session.
        worker = WorkerConfig(initial_credits=params.get("credits", WorkerConfig().initial_credits))
        if transport == "tcp":
            from aqueduct.connector.worker.tcp_listener import serve_tcp

            server = await serve_tcp("127.0.0.1", 0, ingest, worker)
        else:
            from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct

            backend = params.get("backend", "aioquic")
            server = await serve_aqueduct(
                listen_host(backend), 0, ingest, worker, certfile=certs.server_cert, keyfile=certs.server_key,
                backend=backend,
            )
        ready(server.port)
        try:
            ended = await run_until_idle(ingest.ended, meter, params["idle"], params["limit"])
        finally:
            await server.close()
            committer.cancel()
            await asyncio.gather(committer, return_exceptions=True)
            log.close()
    return {**meter.result(), "ended": ended, "commits": ingest.group_commits}


async def _send(params: dict[str, Any], certs: Certs, port: int, scheme: str) -> dict[str, Any]:
    body = payload(params["size"])
    url = f"{scheme}://127.0.0.1:{port}"
    connector = Connector(
        url, program="bench", instance="c0", cafile=str(certs.ca), connect_timeout=20,
        quic_backend=params.get("backend", "aioquic"), max_buffer=params.get("max_buffer", DEFAULT_MAX_BUFFER),
    )  # fmt: skip
    await connector.connect()
    try:
        stream = await connector.stream(STREAM_ID, "bench/1")
        batch = params.get("batch", 1)
        if batch > 1:  # a producer handing over records as they come in bulk (send_many)
            bodies = [body] * batch
            send_many = stream.send_many
            sent = batch * await send_for(params["seconds"], lambda: send_many(bodies))
        else:
            send = stream.send
            sent = await send_for(params["seconds"], lambda: send(body))
    finally:
        await connector.close(flush_timeout=params["limit"])
    return {"sent": sent, "connections": connector.stats.connections}


async def serve_aqueduct(params: dict[str, Any], certs: Certs, ready: Callable[[int], None]) -> dict[str, Any]:
    return await _serve(params, certs, ready, "aqueduct")


async def serve_tcp(params: dict[str, Any], certs: Certs, ready: Callable[[int], None]) -> dict[str, Any]:
    return await _serve(params, certs, ready, "tcp")


async def send_aqueduct(params: dict[str, Any], certs: Certs, port: int) -> dict[str, Any]:
    return await _send(params, certs, port, "aqueduct")


async def send_tcp(params: dict[str, Any], certs: Certs, port: int) -> dict[str, Any]:
    return await _send(params, certs, port, "tcp")
