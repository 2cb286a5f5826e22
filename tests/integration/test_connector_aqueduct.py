"""Connector client and worker over real Aqueduct (QUIC on 127.0.0.1)."""

from __future__ import annotations

import asyncio

import pytest

import aqueduct.runtime as rt
from aqueduct.connector.errors import ConnectorRefused
from aqueduct.connector.frames import EPHEMERAL, ConnectorMessage, Notify, encode
from aqueduct.connector.producer.client import UNORDERED, UNRELIABLE, Connector
from aqueduct.connector.worker.memory_sink import MemorySink
from aqueduct.connector.worker_session import WorkerConfig
from tests.waiting import wait_until

TIMEOUT = 30.0

@pytest.fixture
async def worker(certs, server_backend, server_host):
    from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct

    servers = []

    async def start(config: WorkerConfig | None = None, sink: MemorySink | None = None):
        sink = sink or MemorySink()
        server = await serve_aqueduct(
            server_host, 0, sink, config, certfile=certs.server_cert, keyfile=certs.server_key,
            backend=server_backend,
        )
        servers.append(server)
        return sink, f"aqueduct://127.0.0.1:{server.port}", server

    yield start
    for server in servers:
        await server.close()


async def test_handshake_streams_and_acks(worker, certs, client_backend) -> None:
    sink, url, _ = await worker()
    async with Connector(url, program="p", instance="i", cafile=str(certs.ca), quic_backend=client_backend) as conn:
        a = await conn.stream(1, "a")
        b = await conn.stream(2, "b")
        for i in range(100):
            await a.send(b"a%d" % i)
            await b.send(b"b%d" % i)
        await asyncio.wait_for(conn.wait_all_acked(), TIMEOUT)
    assert sink.payloads("p", "i", 1) == [b"a%d" % i for i in range(100)]
    assert sink.payloads("p", "i", 2) == [b"b%d" % i for i in range(100)]


async def test_bad_cookie_over_aqueduct(worker, certs, client_backend) -> None:
    _, url, _ = await worker(WorkerConfig(cookie=b"secret"))
    with pytest.raises(ConnectorRefused, match="^bad cookie$"):
        async with Connector(url, cookie=b"nope", cafile=str(certs.ca), quic_backend=client_backend, connect_timeout=TIMEOUT):
            pass


async def test_unordered_stream_is_deduplicated_and_complete(worker, certs, client_backend) -> None:
    sink, url, _ = await worker()
    async with Connector(url, program="p", instance="u", cafile=str(certs.ca), quic_backend=client_backend) as conn:
        stream = await conn.stream(5, "u", mode=UNORDERED)
        for i in range(300):
            await stream.send(b"%d" % i)
        await asyncio.wait_for(stream.wait_acked(300), TIMEOUT)
    got = sorted((m.message_id, m.payload) for m in sink.messages("p", "u", 5))
    assert got == [(i, b"%d" % i) for i in range(300)]  # any arrival order, each id once with its payload


async def test_restart_resumes_over_aqueduct(worker, certs, client_backend) -> None:
    sink, url, _ = await worker(WorkerConfig(initial_credits=16))
    async with Connector(url, program="p", instance="r", cafile=str(certs.ca), quic_backend=client_backend, backoff=(0.01, 0.1)) as conn:
        stream = await conn.stream(1, "s")
        for i in range(200):
            await stream.send(b"%d" % i)
            if i == 80:
                await sink.peers[0].restart()
        await asyncio.wait_for(stream.wait_acked(200), TIMEOUT)
        assert conn.stats.connections == 2
    assert [(m.message_id, m.payload) for m in sink.messages("p", "r", 1)] == [(i, b"%d" % i) for i in range(200)]


async def test_send_many_over_aqueduct_with_a_restart(worker, certs, client_backend) -> None:
    """Batches on an ORDERED and an UNORDERED stream, cut by a RESTART: every id once."""
    sink, url, _ = await worker(WorkerConfig(initial_credits=50))
    async with Connector(url, program="p", instance="m", cafile=str(certs.ca), quic_backend=client_backend, backoff=(0.01, 0.1)) as conn:
        ordered = await conn.stream(1, "o")
        unordered = await conn.stream(2, "u", mode=UNORDERED)
        for k in range(8):
            await ordered.send_many([b"o%d" % (k * 64 + i) for i in range(64)])
            await unordered.send_many([b"u%d" % (k * 64 + i) for i in range(64)])
            if k == 3:
                await sink.peers[0].restart()
        await asyncio.wait_for(conn.wait_all_acked(), TIMEOUT)
        assert conn.stats.connections == 2
    assert [(m.message_id, m.payload) for m in sink.messages("p", "m", 1)] == [(i, b"o%d" % i) for i in range(512)]
    assert sorted((m.message_id, m.payload) for m in sink.messages("p", "m", 2)) == [(i, b"u%d" % i) for i in range(512)]


async def test_ephemeral_messages_on_an_unreliable_channel(worker, certs, client_backend) -> None:
    """At most once: datagrams sent before the worker adopted the channel may vanish."""
    sink, url, _ = await worker()
    async with Connector(url, program="p", instance="e", cafile=str(certs.ca), quic_backend=client_backend) as conn:
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


async def test_message_on_another_streams_channel_is_refused(worker, certs, client_backend) -> None:
    """A raw Aqueduct client breaking section 3 gets the exact ERROR, then the worker closes."""
    _, _, server = await worker()
    entry, control_rx = await _raw_session(server.port, certs.ca)
    try:
        tx, rx = rt.channel()
        await entry.send(encode(Notify(1, "s", 0)), attachments=[rx])
        await tx.send(encode(ConnectorMessage(0, 2, 0, payload=b"")))
        assert await _error_reason(control_rx) == (
            "MESSAGE frame on the channel of stream 1: only that stream's MESSAGE frames go there"
        )
        await asyncio.wait_for(entry.connection.wait_closed(), TIMEOUT)
    finally:
        await entry.connection.close()


async def test_eos_then_renotify_over_aqueduct(worker, certs, client_backend) -> None:
    sink, url, _ = await worker()
    async with Connector(url, program="p", instance="x", cafile=str(certs.ca), quic_backend=client_backend) as conn:
        stream = await conn.stream(1, "s")
        await stream.send(b"a", eos=True)
        await stream.reopen()
        await stream.send(b"b", eos=True)
        await asyncio.wait_for(stream.wait_acked(2), TIMEOUT)
    assert sink.payloads("p", "x", 1) == [b"a", b"b"]


async def _raw_session(port: int, cafile, headers=None):
    """A hand-made connector: HELLO done, returns (entrypoint, control receiver)."""
    from aqueduct.connector.frames import PROTOCOL_VERSION, Hello

    entry = await rt.connect("127.0.0.1", port, cafile=cafile, headers=headers)
    control_tx, control_rx = rt.channel()
    await entry.send(encode(Hello(PROTOCOL_VERSION, b"", "raw", "r")), attachments=[control_tx])
    return entry, control_rx


async def _error_reason(control_rx: rt.Receiver) -> str:
    from aqueduct.connector.frames import Error, FrameSplitter

    frames: list = []
    for _ in range(100):  # OK, then ACKs, then the ERROR
        frames += FrameSplitter().feed(await asyncio.wait_for(control_rx.recv(), TIMEOUT))
        if isinstance(frames[-1], Error):
            return frames[-1].reason
    raise AssertionError(f"no ERROR in {frames}")


@pytest.mark.parametrize(
    ("value", "kind"), [(10**12, "int"), ("text", "str"), ({"a": 1}, "dict")]
)
async def test_stream_payload_that_is_not_raw_bytes_ends_only_that_session(
    worker, certs, value, kind, client_backend
) -> None:
    """A CBOR value on a stream channel: ERROR naming the type, connection closed, others fine.

    (A CBOR integer n must never become n zero bytes.)
    """
    sink, url, server = await worker()
    async with Connector(url, program="good", instance="g", cafile=str(certs.ca), quic_backend=client_backend) as conn:
        good = await conn.stream(1, "good")
        await good.send(b"before")
        entry, control_rx = await _raw_session(server.port, certs.ca)
        try:
            tx, rx = rt.channel()
            await entry.send(encode(Notify(1, "s", 0)), attachments=[rx])
            await tx.send(value)
            assert await _error_reason(control_rx) == (
                f"connector payloads must be raw bytes, got {kind}"
            )
            await asyncio.wait_for(entry.connection.wait_closed(), TIMEOUT)
        finally:
            await entry.connection.close()
        await good.send(b"after")
        await good.wait_acked(2, TIMEOUT)
    assert sink.payloads("good", "g", 1) == [b"before", b"after"]
    assert sink.payloads("raw", "r", 1) == []


async def test_entrypoint_payload_that_is_not_valid_cbor_ends_the_session(worker, certs, client_backend) -> None:
    """A payload the runtime cannot decode (labelled CBOR, not CBOR) is refused, not a crash."""
    _, _, server = await worker()
    octet_default = {"content-type": "application/octet-stream"}
    entry, control_rx = await _raw_session(server.port, certs.ca, octet_default)
    try:
        await entry.send(b"\xff\xff", headers={"content-type": "application/cbor"})
        reason = await _error_reason(control_rx)
        assert reason.startswith("connector payloads must be raw bytes: ")
        assert "not valid CBOR" in reason
        await asyncio.wait_for(entry.connection.wait_closed(), TIMEOUT)
    finally:
        await entry.connection.close()
    assert not server.peers


WORKER_SCRIPT = """
import asyncio, sys
from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct
from aqueduct.connector.worker.memory_sink import MemorySink

async def main():
    server = await serve_aqueduct("127.0.0.1", int(sys.argv[3]), MemorySink(),
                                  certfile=sys.argv[1], keyfile=sys.argv[2])
    print(server.port, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def _worker_process(certs, port: int = 0) -> tuple[asyncio.subprocess.Process, int]:
    import sys

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WORKER_SCRIPT, str(certs.server_cert), str(certs.server_key),
        str(port), stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    return proc, int(await asyncio.wait_for(proc.stdout.readline(), TIMEOUT))


async def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


async def test_killed_bridge_is_noticed_within_the_idle_timeout_then_resumed(certs, client_backend) -> None:
    idle = 1.0
    first, port = await _worker_process(certs)
    second = None
    try:
        url = f"aqueduct://127.0.0.1:{port}"
        async with Connector(
            url, program="p", instance="k", cafile=str(certs.ca), quic_backend=client_backend, idle_timeout=idle,
            backoff=(0.05, 0.5),
        ) as conn:
            stream = await conn.stream(1, "s")
            await stream.send(b"a")
            await stream.wait_acked(1, TIMEOUT)
            await asyncio.sleep(3 * idle)  # idle but healthy: keep-alive holds it up
            assert conn.connected and conn.stats.connections == 1
            await _kill(first)  # no close, no ERROR: only the silence tells
            loop = asyncio.get_running_loop()
            killed_at = loop.time()
            for _ in range(int(TIMEOUT / 0.05)):  # bounded poll
                if not conn.connected:
                    break
                await asyncio.sleep(0.05)
            assert loop.time() - killed_at < 10 * idle  # not QUIC's 60 s default
            # attempts meanwhile find nobody: retried with backoff
            await wait_until(lambda: any(e.startswith("connect: ") for e in conn.stats.errors),
                             "a failed reconnect attempt", TIMEOUT)  # fmt: skip
            second, _ = await _worker_process(certs, port)
            await stream.send(b"b")
            await stream.wait_acked(2, TIMEOUT)
            assert conn.stats.connections == 2
    finally:
        await _kill(first)
        if second is not None:
            await _kill(second)
