"""Connector client and worker over real Aqueduct (QUIC on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import inspect

import pytest

import aqueduct.runtime as rt
from aqueduct.connector.client import UNORDERED, UNRELIABLE, Connector, ConnectorRefused
from aqueduct.connector.frames import EPHEMERAL, Message, Notify, encode
from aqueduct.connector.memory_sink import MemorySink
from aqueduct.connector.worker_session import WorkerConfig

TIMEOUT = 30.0

pytestmark = pytest.mark.skipif(
    "attachments" not in inspect.signature(rt.Sender.send).parameters,
    reason="needs Sender.send(payload, attachments=...) from the runtime (connector-wire section 3)",
)


@pytest.fixture
async def worker(certs):
    from aqueduct.connector.aqueduct_transport import serve_aqueduct

    servers = []

    async def start(config: WorkerConfig | None = None, sink: MemorySink | None = None):
        sink = sink or MemorySink()
        server = await serve_aqueduct(
            "127.0.0.1", 0, sink, config, certfile=certs.server_cert, keyfile=certs.server_key
        )
        servers.append(server)
        return sink, f"aqueduct://127.0.0.1:{server.port}", server

    yield start
    for server in servers:
        await server.close()


async def test_handshake_streams_and_acks(worker, certs) -> None:
    sink, url, _ = await worker()
    async with Connector(url, program="p", instance="i", cafile=str(certs.ca)) as conn:
        a = await conn.stream(1, "a")
        b = await conn.stream(2, "b")
        for i in range(100):
            await a.send(b"a%d" % i)
            await b.send(b"b%d" % i)
        await asyncio.wait_for(conn.wait_all_acked(), TIMEOUT)
    assert sink.payloads("p", "i", 1) == [b"a%d" % i for i in range(100)]
    assert sink.payloads("p", "i", 2) == [b"b%d" % i for i in range(100)]


async def test_bad_cookie_over_aqueduct(worker, certs) -> None:
    _, url, _ = await worker(WorkerConfig(cookie=b"secret"))
    with pytest.raises(ConnectorRefused, match="^bad cookie$"):
        async with Connector(url, cookie=b"nope", cafile=str(certs.ca), connect_timeout=TIMEOUT):
            pass


async def test_unordered_stream_is_deduplicated_and_complete(worker, certs) -> None:
    sink, url, _ = await worker()
    async with Connector(url, program="p", instance="u", cafile=str(certs.ca)) as conn:
        stream = await conn.stream(5, "u", mode=UNORDERED)
        for i in range(300):
            await stream.send(b"%d" % i)
        await asyncio.wait_for(stream.wait_acked(300), TIMEOUT)
    ids = [m.message_id for m in sink.messages("p", "u", 5)]
    assert sorted(ids) == list(range(300))  # any arrival order, each id once


async def test_restart_resumes_over_aqueduct(worker, certs) -> None:
    sink, url, _ = await worker(WorkerConfig(initial_credits=16))
    async with Connector(url, program="p", instance="r", cafile=str(certs.ca), backoff=(0.01, 0.1)) as conn:
        stream = await conn.stream(1, "s")
        for i in range(200):
            await stream.send(b"%d" % i)
            if i == 80:
                await sink.peers[0].restart()
        await asyncio.wait_for(stream.wait_acked(200), TIMEOUT)
        assert conn.stats.connections == 2
    assert [m.message_id for m in sink.messages("p", "r", 1)] == list(range(200))


async def test_ephemeral_messages_on_an_unreliable_channel(worker, certs) -> None:
    """At most once: datagrams sent before the worker adopted the channel may vanish."""
    sink, url, _ = await worker()
    async with Connector(url, program="p", instance="e", cafile=str(certs.ca)) as conn:
        stream = await conn.stream(9, "metrics", mode=UNRELIABLE)
        sent = 0
        while sent < 500 and len(sink.messages("p", "e", 9)) < 5:
            assert await stream.send(b"%d" % sent) is None
            sent += 1
            await asyncio.sleep(0.01)
        assert stream.unacked == 0  # never buffered for re-sending
    got = [m.payload for m in sink.messages("p", "e", 9)]
    assert len(got) >= 5 and len(set(got)) == len(got)
    assert all(m.flags == EPHEMERAL and m.message_id is None for m in sink.messages("p", "e", 9))


async def test_message_on_another_streams_channel_is_refused(worker, certs) -> None:
    """A raw Aqueduct client breaking section 3 gets the exact ERROR on its control channel."""
    sink, _, server = await worker()
    from aqueduct.connector.frames import PROTOCOL_VERSION, Error, FrameSplitter, Hello

    async with await rt.connect("127.0.0.1", server.port, cafile=certs.ca) as entry:
        control_tx, control_rx = rt.channel()
        await entry.send(encode(Hello(PROTOCOL_VERSION, b"", "raw", "r")), attachments=[control_tx])
        tx, rx = rt.channel()
        await entry.send(encode(Notify(1, "s", 0)), attachments=[rx])
        await tx.send(encode(Message(0, 2, 0, payload=b"")))
        frames = []
        while not any(isinstance(f, Error) for f in frames):
            frames += FrameSplitter().feed(await asyncio.wait_for(control_rx.recv(), TIMEOUT))
    assert frames[-1] == Error(
        "MESSAGE frame on the channel of stream 1: only that stream's MESSAGE frames go there"
    )


async def test_eos_then_renotify_over_aqueduct(worker, certs) -> None:
    sink, url, _ = await worker()
    async with Connector(url, program="p", instance="x", cafile=str(certs.ca)) as conn:
        stream = await conn.stream(1, "s")
        await stream.send(b"a", eos=True)
        await stream.reopen()
        await stream.send(b"b", eos=True)
        await asyncio.wait_for(stream.wait_acked(2), TIMEOUT)
    assert sink.payloads("p", "x", 1) == [b"a", b"b"]
