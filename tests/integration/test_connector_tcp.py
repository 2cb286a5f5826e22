"""Connector client against a real worker session over loopback TCP."""

from __future__ import annotations

import asyncio

import pytest

from aqueduct.connector.errors import ConnectorRefused, CreditTimeout
from aqueduct.connector.events import SessionEnded
from aqueduct.connector.frames import (
    EPHEMERAL,
    PROTOCOL_VERSION,
    Ack,
    ConnectorMessage,
    Error,
    FrameSplitter,
    Hello,
    Notify,
    Ok,
    encode,
)
from aqueduct.connector.producer.client import UNRELIABLE, Connector
from aqueduct.connector.worker.memory_sink import MemorySink
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig
from aqueduct.proto.errors import LocalProtocolError
from tests.waiting import count_calls, wait_until

TIMEOUT = 20.0


@pytest.fixture
async def worker():
    """A TCP worker on a free loopback port with an in-memory sink; yields (sink, url, server)."""
    servers = []

    async def start(config: WorkerConfig | None = None, sink: MemorySink | None = None):
        sink = sink or MemorySink()
        server = await serve_tcp("127.0.0.1", 0, sink, config)
        servers.append(server)
        return sink, f"tcp://127.0.0.1:{server.port}", server

    yield start
    for server in servers:
        await server.close()


async def raw_session(port: int, data: bytes) -> list:
    """Send raw bytes, read until the worker closes; return the frames it sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        received = await asyncio.wait_for(reader.read(), TIMEOUT)  # until EOF
    finally:
        writer.close()
    return FrameSplitter().feed(received)


HELLO = encode(Hello(PROTOCOL_VERSION, b"", "raw", "r1"))


async def test_handshake_send_and_ack(worker) -> None:
    sink, url, _ = await worker()
    async with Connector(url, program="gen", instance="gen-1") as conn:
        stream = await conn.stream(1, "orders/0")
        assert stream.resume_from == 0
        for i in range(200):
            await stream.send(f"m{i}".encode(), key=b"k", event_time=1_700_000_000_000_000 + i)
        await asyncio.wait_for(stream.wait_acked(200), TIMEOUT)
        assert stream.acked == 200 and stream.unacked == 0
    got = sink.messages("gen", "gen-1", 1)
    assert [m.payload for m in got] == [f"m{i}".encode() for i in range(200)]
    assert [m.message_id for m in got] == list(range(200))
    assert got[5].key == b"k" and got[5].event_time == 1_700_000_000_000_005


async def test_reconnecting_connector_resumes_where_the_worker_is(worker) -> None:
    sink, url, _ = await worker()
    async with Connector(url, program="gen", instance="gen-1") as conn:
        stream = await conn.stream(1, "s")
        for i in range(10):
            await stream.send(b"%d" % i)
        await asyncio.wait_for(stream.wait_acked(10), TIMEOUT)
    async with Connector(url, program="gen", instance="gen-1") as conn:
        stream = await conn.stream(1, "s")
        assert stream.resume_from == 10
        assert await stream.send(b"10") == 10
        await asyncio.wait_for(stream.wait_acked(11), TIMEOUT)
    assert sink.payloads("gen", "gen-1", 1) == [b"%d" % i for i in range(11)]


async def test_bad_cookie_is_refused_and_never_echoed(worker) -> None:
    _, url, server = await worker(WorkerConfig(cookie=b"the-real-secret"))
    with pytest.raises(ConnectorRefused, match="^bad cookie$"):
        async with Connector(url, cookie=b"guess", connect_timeout=TIMEOUT):
            pass
    frames = await raw_session(server.port, encode(Hello(PROTOCOL_VERSION, b"guess", "p", "i")))
    assert frames == [Error("bad cookie")]


async def test_cookie_sent_to_a_worker_expecting_none_is_refused(worker) -> None:
    _, url, _ = await worker()
    with pytest.raises(ConnectorRefused, match="bad cookie: this worker expects no cookie"):
        async with Connector(url, cookie=b"s3cret", connect_timeout=TIMEOUT):
            pass


async def test_right_cookie_is_accepted(worker) -> None:
    sink, url, _ = await worker(WorkerConfig(cookie=b"s3cret"))
    async with Connector(url, program="p", instance="i", cookie="s3cret") as conn:
        stream = await conn.stream(3, "s")
        await stream.send(b"ok")
        await asyncio.wait_for(stream.wait_acked(1), TIMEOUT)
    assert sink.payloads("p", "i", 3) == [b"ok"]


NOTIFY_AND_ONE = encode(Notify(1, "s", 0)) + encode(ConnectorMessage(0, 1, 0, payload=b"kept"))


@pytest.mark.parametrize(
    ("config", "tail", "reason"),
    [
        (WorkerConfig(), b"", None),
        (WorkerConfig(max_frame_size=1000), (5000).to_bytes(4, "big") + b"x" * 50, "frame too large: 5000 > 1000"),
        (WorkerConfig(), encode(ConnectorMessage(0, 2, 0, payload=b"")), "message for unknown stream 2"),
        (WorkerConfig(initial_credits=2), encode(ConnectorMessage(0, 1, 1, payload=b"")), "credit exceeded"),
        (WorkerConfig(), bytes.fromhex("000000015a"), "unknown frame tag 0x5a"),
        (WorkerConfig(), encode(Ack(1, ())), "ACK frame may not be sent to a worker"),
        (WorkerConfig(), bytes.fromhex("0000000b4d00000000000000000000"), "MESSAGE: body ends inside message id (needs 8 bytes, 0 left)"),
    ],
    ids=["clean-close", "oversized", "unknown-stream", "credit-overrun", "unknown-tag", "ack-to-worker", "short-body"],
)
async def test_violation_gets_exact_error_and_keeps_accepted_data(
    worker, config: WorkerConfig, tail: bytes, reason: str | None
) -> None:
    sink, url, server = await worker(config)
    # Another, well-behaved session runs alongside and must not notice.
    async with Connector(url, program="good", instance="g") as conn:
        good = await conn.stream(1, "s")
        await good.send(b"before")
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(HELLO + NOTIFY_AND_ONE + tail)
        await writer.drain()
        if reason is None:
            writer.write_eof()
        received = FrameSplitter().feed(await asyncio.wait_for(reader.read(), TIMEOUT))
        writer.close()
        assert received[0] == Ok(config.initial_credits, ())
        expected_errors = [] if reason is None else [Error(reason)]
        assert [f for f in received if isinstance(f, Error)] == expected_errors
        await good.send(b"after")
        await asyncio.wait_for(good.wait_acked(2), TIMEOUT)
    assert sink.payloads("raw", "r1", 1) == [b"kept"]
    assert sink.payloads("good", "g", 1) == [b"before", b"after"]
    if reason is not None:
        assert SessionEnded(reason, "local") in sink.events


async def test_bad_version_gets_exact_error(worker) -> None:
    _, _, server = await worker()
    frames = await raw_session(server.port, encode(Hello("v2", b"", "p", "i")))
    assert frames == [Error("unsupported protocol version: v2")]


async def test_eos_then_renotify(worker) -> None:
    sink, url, _ = await worker()
    async with Connector(url, program="p", instance="i") as conn:
        stream = await conn.stream(1, "s")
        await stream.send(b"a")
        await stream.send(b"b", eos=True)
        with pytest.raises(Exception, match="closed"):
            await stream.send(b"too late")
        await stream.reopen()
        await stream.send(b"c", eos=True)
        await asyncio.wait_for(stream.wait_acked(3), TIMEOUT)
    assert sink.payloads("p", "i", 1) == [b"a", b"b", b"c"]


async def test_restart_resumes_without_gap_or_duplicate(worker) -> None:
    sink, url, _ = await worker(WorkerConfig(initial_credits=8), MemorySink(auto_ack=False))
    total = 300
    async with Connector(url, program="p", instance="i", backoff=(0.01, 0.1)) as conn:
        stream = await conn.stream(1, "s")

        async def produce() -> None:
            for i in range(total):
                await stream.send(b"%d" % i)

        async def commit_and_restart() -> None:
            restarts = 0
            while stream.acked < total:
                # A peer, and its stream notified (a new session's NOTIFY may still be on its way).
                await sink.wait_for(lambda: sink.peers and 1 in sink.streams.get(("p", "i"), {}), TIMEOUT)
                peer = sink.peers[0]
                if restarts < 3 and len(sink.messages("p", "i", 1)) > 60 * (restarts + 1):
                    restarts += 1
                    await peer.restart()  # unacked messages stay in the connector's buffer
                    continue
                stored = sink.streams[("p", "i")][1]
                peer.ack([(1, stored.point)], credits=8)
                await asyncio.sleep(0.005)
            assert restarts == 3

        await asyncio.wait_for(asyncio.gather(produce(), commit_and_restart()), TIMEOUT * 3)
        assert conn.stats.connections == 4
        assert conn.resent > 0
    assert [(m.message_id, m.payload) for m in sink.messages("p", "i", 1)] == [(i, b"%d" % i) for i in range(total)]


async def test_lost_connection_resumes_without_gap_or_duplicate(worker) -> None:
    sink, url, _ = await worker(WorkerConfig(initial_credits=16))
    total = 400
    async with Connector(url, program="p", instance="i", backoff=(0.01, 0.1)) as conn:
        stream = await conn.stream(1, "s")
        for i in range(total):
            await stream.send(b"%d" % i)
            if i in (100, 250):
                sink.peers[0].abort()  # the worker's socket dies mid-stream
        await asyncio.wait_for(stream.wait_acked(total), TIMEOUT)
        assert conn.stats.connections >= 2
    assert [(m.message_id, m.payload) for m in sink.messages("p", "i", 1)] == [(i, b"%d" % i) for i in range(total)]


async def test_ephemeral_messages_on_an_unreliable_stream(worker) -> None:
    sink, url, _ = await worker()
    async with Connector(url, program="p", instance="i") as conn:
        stream = await conn.stream(9, "metrics", mode=UNRELIABLE)
        for i in range(5):
            assert await stream.send(b"%d" % i) is None
        assert stream.unacked == 0  # at most once: nothing buffered
        await sink.wait_for(lambda: len(sink.messages("p", "i", 9)) == 5, TIMEOUT)
    got = sink.messages("p", "i", 9)
    assert all(m.flags == EPHEMERAL and m.message_id is None for m in got)


async def test_connector_refuses_a_worker_that_breaks_the_protocol() -> None:
    """A 'worker' answering HELLO with NOTIFY gets the connector's ERROR, and the caller an exception."""
    seen: list = []

    async def bogus_worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.extend(FrameSplitter().feed(await reader.read(1024)))
        writer.write(encode(Notify(1, "s", 0)))
        await writer.drain()
        seen.extend(FrameSplitter().feed(await reader.read(1024)))
        writer.close()

    server = await asyncio.start_server(bogus_worker, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(ConnectorRefused, match="NOTIFY frame may not be sent to a connector"):
            async with Connector(f"tcp://127.0.0.1:{port}", connect_timeout=TIMEOUT):
                pass
    finally:
        server.close()
    assert seen[-1] == Error("NOTIFY frame may not be sent to a connector")


async def test_send_waits_for_credits_and_times_out(worker) -> None:
    sink, url, _ = await worker(WorkerConfig(initial_credits=1), MemorySink(auto_ack=False))
    async with Connector(url, program="p", instance="c", credits_timeout=0.3) as conn:
        stream = await conn.stream(1, "s")  # NOTIFY's credit comes back at once
        await stream.send(b"a")
        with pytest.raises(CreditTimeout):
            await stream.send(b"b")  # stays queued: it goes out with the next credit
        sink.peers[0].grant_credits(2)
        await stream.send(b"c")
        await sink.wait_for(lambda: len(sink.messages("p", "c", 1)) == 3, TIMEOUT)


async def test_unacked_buffer_is_bounded(worker) -> None:
    sink, url, _ = await worker(sink=MemorySink(auto_ack=False))
    async with Connector(url, program="p", instance="b", max_buffer=3) as conn:
        stream = await conn.stream(1, "s")
        for i in range(3):
            await stream.send(b"%d" % i)
        waits = count_calls(conn, "wait_until")
        blocked = asyncio.ensure_future(stream.send(b"3"))
        await sink.wait_for(lambda: len(sink.messages("p", "b", 1)) == 3, TIMEOUT)
        # The send reached the bound and chose to wait: its chance to go past it came and went.
        await wait_until(lambda: waits() >= 1, "the fourth send waiting for room", TIMEOUT)
        assert not blocked.done() and stream.unacked == 3
        sink.peers[0].ack([(1, 2)], credits=3)
        assert await asyncio.wait_for(blocked, TIMEOUT) == 3
        assert stream.acked == 2 and stream.unacked == 2


async def test_unreachable_worker_is_reported_after_connect_timeout() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()  # nothing listens there any more
    await server.wait_closed()
    with pytest.raises(ConnectionError, match=rf"no handshake with tcp://127.0.0.1:{port} within 0.5 s \(\d+ failed attempts?, last: connect: "):
        async with Connector(f"tcp://127.0.0.1:{port}", connect_timeout=0.5, backoff=(0.01, 0.05)):
            pass


async def test_ok_point_after_reconnect_is_durable_not_committed(worker) -> None:
    """OK's point only spares re-sends; ``acked`` and ``wait_all_acked`` move on ACK alone."""
    sink, url, _ = await worker(WorkerConfig(initial_credits=100), MemorySink(auto_ack=False))
    async with Connector(url, program="p", instance="d", backoff=(0.01, 0.1)) as conn:
        stream = await conn.stream(1, "s")
        for i in range(10):
            await stream.send(b"%d" % i)
        await sink.wait_for(lambda: len(sink.messages("p", "d", 1)) == 10, TIMEOUT)
        sink.peers[0].ack([(1, 4)])  # Spark committed ids 0..3; 4..9 are only durable
        await asyncio.wait_for(stream.wait_acked(4), TIMEOUT)
        await sink.peers[0].restart()
        for _ in range(int(TIMEOUT / 0.01)):  # bounded poll for the second handshake
            if conn.stats.connections == 2 and conn.connected:
                break
            await asyncio.sleep(0.01)
        assert stream.resume_from == 10  # the worker holds everything durably
        assert stream.acked == 4 and stream.unacked == 6  # ... but committed only up to 4
        waiter = asyncio.ensure_future(conn.wait_all_acked(TIMEOUT))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not waiter.done()
        sink.peers[-1].ack([(1, 10)])  # the commit reaches the live session
        await waiter
        assert stream.acked == 10 and stream.unacked == 0
    assert [m.message_id for m in sink.messages("p", "d", 1)] == list(range(10))  # none re-sent


async def test_send_many_is_send_of_each(worker) -> None:
    """A batch gets the next ids in order, between single sends, with its event times."""
    sink, url, _ = await worker()
    t0 = 1_700_000_000_000_000
    async with Connector(url, program="p", instance="m") as conn:
        stream = await conn.stream(1, "s")
        await stream.send(b"first")
        ids = await stream.send_many([b"a%d" % i for i in range(500)], event_times=[t0 + i for i in range(500)])
        assert ids == list(range(1, 501))
        assert await stream.send(b"last", key=b"k") == 501
        await asyncio.wait_for(stream.wait_acked(502), TIMEOUT)
    got = sink.messages("p", "m", 1)
    assert [m.message_id for m in got] == list(range(502))
    assert [m.payload for m in got] == [b"first"] + [b"a%d" % i for i in range(500)] + [b"last"]
    assert got[0].event_time is None and got[7].event_time == t0 + 6 and got[-1].key == b"k"


async def test_send_many_fills_the_unacked_buffer_and_no_further(worker) -> None:
    sink, url, _ = await worker(sink=MemorySink(auto_ack=False))
    async with Connector(url, program="p", instance="b", max_buffer=5) as conn:
        stream = await conn.stream(1, "s")
        waits = count_calls(conn, "wait_until")
        blocked = asyncio.ensure_future(stream.send_many([b"%d" % i for i in range(8)]))
        await sink.wait_for(lambda: len(sink.messages("p", "b", 1)) == 5, TIMEOUT)
        await wait_until(lambda: waits() >= 1, "send_many waiting for room after 5", TIMEOUT)
        assert not blocked.done() and stream.unacked == 5
        sink.peers[0].ack([(1, 3)], credits=5)
        assert await asyncio.wait_for(blocked, TIMEOUT) == list(range(8))
        await sink.wait_for(lambda: len(sink.messages("p", "b", 1)) == 8, TIMEOUT)
        assert stream.unacked == 5  # ids 3..7 wait for their commit


async def test_send_many_resumes_after_lost_connections(worker) -> None:
    """Batches larger than the credits, cut by dying sockets: every id once, in order."""
    sink, url, _ = await worker(WorkerConfig(initial_credits=16))
    async with Connector(url, program="p", instance="i", backoff=(0.01, 0.1)) as conn:
        stream = await conn.stream(1, "s")
        for k in range(10):
            await stream.send_many([b"%d" % (k * 40 + i) for i in range(40)])
            if k in (2, 6):
                sink.peers[0].abort()
        await asyncio.wait_for(stream.wait_acked(400), TIMEOUT)
        assert conn.stats.connections >= 2
    got = sink.messages("p", "i", 1)
    assert [m.message_id for m in got] == list(range(400))
    assert [m.payload for m in got] == [b"%d" % i for i in range(400)]


async def test_send_many_misuse_is_refused(worker) -> None:
    sink, url, _ = await worker()
    async with Connector(url, program="p", instance="x") as conn:
        stream = await conn.stream(1, "s")
        with pytest.raises(ValueError, match=r"^2 event times for 3 payloads$"):
            await stream.send_many([b"a", b"b", b"c"], event_times=[1, 2])
        await stream.send(b"end", eos=True)
        with pytest.raises(LocalProtocolError, match=r"^stream 1 is closed \(EOS sent\); re-open it$"):
            await stream.send_many([b"late"])
        metrics = await conn.stream(9, "metrics", mode=UNRELIABLE)
        assert await metrics.send_many([b"m0", b"m1"]) is None
        assert metrics.unacked == 0  # at most once: nothing buffered
        await sink.wait_for(lambda: len(sink.messages("p", "x", 9)) == 2, TIMEOUT)
        assert stream.next_id == 1  # the refused calls took no id
    assert [m.payload for m in sink.messages("p", "x", 1)] == [b"end"]


async def test_send_many_waits_for_credits_as_send_does(worker) -> None:
    """Out of credit, a batch stops where send() of each would: the same ids taken, the same timeout."""
    sink, url, _ = await worker(WorkerConfig(initial_credits=1), MemorySink(auto_ack=False))
    async with Connector(url, program="p", instance="c", credits_timeout=0.3) as conn:
        stream = await conn.stream(1, "s")  # NOTIFY's credit comes back at once
        with pytest.raises(CreditTimeout):
            await stream.send_many([b"a", b"b", b"c"])
        assert stream.next_id == 2 and stream.unacked == 2  # "b" waits queued, "c" was never taken
        sink.peers[0].grant_credits(2)
        assert await stream.send_many([b"c"]) == [2]
        await sink.wait_for(lambda: len(sink.messages("p", "c", 1)) == 3, TIMEOUT)
    assert [m.payload for m in sink.messages("p", "c", 1)] == [b"a", b"b", b"c"]


async def test_send_many_returns_its_own_ids_when_another_task_sends(worker) -> None:
    """Another task's send() between two rounds gets an id of its own, and the batch does not claim it."""
    sink, url, _ = await worker(sink=MemorySink(auto_ack=False))
    async with Connector(url, program="p", instance="o", max_buffer=3) as conn:
        stream = await conn.stream(1, "s")
        many = asyncio.ensure_future(stream.send_many([b"m%d" % i for i in range(5)]))
        await sink.wait_for(lambda: len(sink.messages("p", "o", 1)) == 3, TIMEOUT)  # the buffer is full
        other = asyncio.ensure_future(stream.send(b"other"))
        for _ in range(200):  # commit whatever arrived until both are done
            if many.done() and other.done():
                break
            stored = sink.streams[("p", "o")][1]
            sink.peers[0].ack([(1, stored.point)], credits=3)
            await asyncio.sleep(0.01)
        ids, other_id = await asyncio.wait_for(many, TIMEOUT), await asyncio.wait_for(other, TIMEOUT)
        await sink.wait_for(lambda: len(sink.messages("p", "o", 1)) == 6, TIMEOUT)
    assert sorted([*ids, other_id]) == list(range(6))
    by_id = {m.message_id: m.payload for m in sink.messages("p", "o", 1)}
    assert [by_id[i] for i in ids] == [b"m%d" % i for i in range(5)] and by_id[other_id] == b"other"
