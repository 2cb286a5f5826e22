"""When a connector given several bridges moves, and when it does not: in-process workers on loopback.

The workers are the connector's real TCP listener with the in-memory sink
(acks at once). A bridge that drains refuses HELLO as busy with a retry
window (``busy: retry within B s, not before A s``); here
:class:`DrainingSession`, the real worker session answering every HELLO
so, stands in for it. The kills of real bridge processes are in
``test_connector_failover.py``.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from aqueduct.connector.frames import Hello
from aqueduct.connector.producer.client import Connector, Delivery
from aqueduct.connector.worker.memory_sink import MemorySink
from aqueduct.connector.worker.server import WorkerServer
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerSession
from aqueduct.runtime.retry_hint import RetryWindow, busy_reason
from tests.ports import free_port
from tests.waiting import wait_until

TIMEOUT = 30.0  # only turns a hang into a failure


class DrainingSession(WorkerSession):
    """A worker session that refuses every HELLO as busy, naming a window (as a draining bridge does)."""

    window = RetryWindow(0.05, 0.1)

    def _on_hello(self, hello: Hello) -> None:
        self.program_name, self.instance_name = hello.program_name, hello.instance_name
        raise self._fail(busy_reason(self.window))


async def worker(port: int = 0, draining: bool = False) -> tuple[MemorySink, WorkerServer]:
    sink = MemorySink()
    server = await serve_tcp("127.0.0.1", port, sink, session_factory=DrainingSession if draining else WorkerSession)
    return sink, server


def url(server: WorkerServer) -> str:
    return f"tcp://127.0.0.1:{server.port}"


def stored_ids(sink: MemorySink, stream_id: int) -> list[int | None]:
    return [m.message_id for m in sink.messages("p", "i", stream_id)]


async def test_a_bridge_that_refuses_as_busy_is_left_at_once_for_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DrainingSession, "window", RetryWindow(60.0, 61.0))  # never waited for here
    _, draining = await worker(draining=True)
    sink, good = await worker()
    try:
        # move_after far away: only the refusal can move it
        async with Connector([url(draining), url(good)], program="p", instance="i", move_after=60.0) as conn:
            assert conn.bridge == url(good) and conn.stats.moves == 1 and conn.stats.retries == 1
            assert "busy: retry within 61.00 s, not before 60.00 s" in conn.stats.errors[-1]
            stream = await conn.stream(1, "s")
            await stream.send_many([b"a", b"b"])
            await conn.wait_all_acked(TIMEOUT)
        assert stored_ids(sink, 1) == [0, 1]
    finally:
        await draining.close()
        await good.close()


async def test_with_one_bridge_a_busy_refusal_is_retried_in_its_window_never_final() -> None:
    _, draining = await worker(draining=True)
    conn = Connector(url(draining), program="p", instance="i", move_after=0.01)  # one URL: move_after plays no part
    try:
        connecting = asyncio.ensure_future(conn.connect())
        await wait_until(lambda: conn.stats.retries >= 3, "three refused attempts", TIMEOUT)
        assert not connecting.done() and conn.stats.moves == 0
        assert all(e.startswith("busy: retry within 0.10 s") for e in conn.stats.errors)
        connecting.cancel()
    finally:
        await conn.close()
        await draining.close()


async def test_when_every_bridge_refuses_as_busy_the_connector_goes_round_and_never_gives_up() -> None:
    _, first = await worker(draining=True)
    _, second = await worker(draining=True)
    conn = Connector([url(first), url(second)], program="p", instance="i")
    try:
        connecting = asyncio.ensure_future(conn.connect())
        await wait_until(lambda: conn.stats.moves >= 4, "two rounds of refusals", TIMEOUT)
        assert not connecting.done() and conn.stats.retries >= conn.stats.moves
        connecting.cancel()
    finally:
        await conn.close()
        await first.close()
        await second.close()


async def test_moves_go_round_the_list_and_each_record_is_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="aqueduct.connector.producer.client")
    ports = [free_port(), free_port()]  # a worker comes back on its own port
    sinks, servers = zip(*[await worker(port) for port in ports], strict=True)
    urls = [f"tcp://127.0.0.1:{port}" for port in ports]
    reports: list[tuple[Exception | None, Delivery]] = []
    conn = Connector(urls, program="p", instance="i", move_after=0.3, backoff=(0.01, 0.05),
                     on_delivery=lambda e, d: reports.append((e, d)))  # fmt: skip
    servers = list(servers)
    try:
        async with conn:
            stream = await conn.stream(1, "s")
            await stream.send_many([b"%d" % i for i in range(10)])
            await conn.wait_all_acked(TIMEOUT)
            await servers[0].close()  # the first bridge is lost: after move_after the second serves
            await wait_until(lambda: conn.connected and conn.bridge == urls[1], "the second bridge", TIMEOUT)
            await stream.send_many([b"%d" % i for i in range(10, 20)])
            await conn.wait_all_acked(TIMEOUT)
            sinks_0, servers[0] = await worker(ports[0])  # the first is back; the second is lost
            await servers[1].close()
            await wait_until(lambda: conn.connected and conn.bridge == urls[0], "the first bridge again", TIMEOUT)
            await stream.send_many([b"%d" % i for i in range(20, 30)])
            await conn.wait_all_acked(TIMEOUT)
        assert conn.stats.moves == 2
        assert stored_ids(sinks[0], 1) == list(range(10))
        assert stored_ids(sinks[1], 1) == list(range(10, 20))  # the second bridge started at the NOTIFY's point
        assert stored_ids(sinks_0, 1) == list(range(20, 30))
        assert sorted(d.message_id for _, d in reports) == list(range(30)) and all(e is None for e, _ in reports)
        moves = [r.getMessage() for r in caplog.records if r.getMessage().startswith("moved from")]
        assert [m.split(": ")[0] for m in moves] == [f"moved from {urls[0]} to {urls[1]}", f"moved from {urls[1]} to {urls[0]}"]
    finally:
        for server in servers:
            await server.close()


async def test_a_bridge_that_accepts_but_never_answers_is_left_after_move_after() -> None:
    """A listener that takes the connection and says nothing (a partition, a hung bridge): no OK within move_after."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    silent = await asyncio.start_server(hold, "127.0.0.1", 0)
    sink, good = await worker()
    urls = [f"tcp://127.0.0.1:{silent.sockets[0].getsockname()[1]}", url(good)]
    try:
        async with Connector(urls, program="p", instance="i", move_after=0.5, connect_timeout=TIMEOUT) as conn:
            assert conn.bridge == urls[1] and conn.stats.moves == 1
            assert conn.stats.errors[0] == "no OK within 0.5 s" and held  # it connected, and heard nothing
            stream = await conn.stream(1, "s")
            await stream.send(b"x")
            await conn.wait_all_acked(TIMEOUT)
        assert stored_ids(sink, 1) == [0]
    finally:
        for writer in held:
            writer.close()
        silent.close()
        await good.close()
