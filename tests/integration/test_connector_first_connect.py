"""The first connection is retried like a reconnect: producers may start before their worker.

Real loopback: the producer starts while nothing listens on the port, the
worker starts there later, and the producer's data arrives exactly once.
A deadline (``connect_timeout`` / ``--connect-timeout``) that runs out
gives the exact error.
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import sys
import threading

from aqueduct.connector.producer.client import Connector
from aqueduct.connector.worker.memory_sink import MemorySink
from aqueduct.connector.worker.tcp_listener import serve_tcp
from tests.waiting import finish

TIMEOUT = 60.0
BACKOFF = (0.01, 0.2)


def free_port(kind: int) -> int:
    """A loopback port nothing listens on now (the worker binds it later)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def until_retried(conn: Connector, times: int) -> None:
    """Wait (bounded) until the connector's first connection failed ``times`` times."""
    for _ in range(int(TIMEOUT / 0.02)):
        if conn.stats.retries >= times:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"only {conn.stats.retries} retries: {list(conn.stats.errors)}")


async def send_through_late_worker(conn: Connector, start_worker) -> MemorySink:
    """Connect before the worker exists, start it, send 20 messages; return its sink."""
    connecting = asyncio.ensure_future(conn.connect())
    try:
        await until_retried(conn, 2)
        assert not connecting.done()  # still trying: no deadline by default
        sink, server = await start_worker()
        try:
            await asyncio.wait_for(connecting, TIMEOUT)
            stream = await conn.stream(0, "s")
            for i in range(20):
                await stream.send(b"m%d" % i)
            await conn.wait_all_acked(TIMEOUT)
            await conn.close()
        finally:
            await server.close()
    finally:
        connecting.cancel()
        await conn.close()
    return sink


async def test_tcp_producer_started_before_the_worker_connects_once_it_listens() -> None:
    port = free_port(socket.SOCK_STREAM)

    async def start_worker():
        sink = MemorySink()
        return sink, await serve_tcp("127.0.0.1", port, sink)

    conn = Connector(f"tcp://127.0.0.1:{port}", program="p", instance="early", backoff=BACKOFF)
    sink = await send_through_late_worker(conn, start_worker)
    assert sink.payloads("p", "early", 0) == [b"m%d" % i for i in range(20)]
    assert conn.stats.connections == 1 and conn.stats.retries >= 2
    assert all(e.startswith("connect: ") for e in conn.stats.errors)


async def test_quic_producer_started_before_the_bridge_connects_once_it_listens(certs) -> None:
    from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct

    port = free_port(socket.SOCK_DGRAM)

    async def start_worker():
        sink = MemorySink()
        server = await serve_aqueduct(
            "127.0.0.1", port, sink, certfile=certs.server_cert, keyfile=certs.server_key
        )
        return sink, server

    conn = Connector(
        f"aqueduct://127.0.0.1:{port}", program="p", instance="early", backoff=BACKOFF,
        cafile=str(certs.ca), idle_timeout=0.5,  # an unanswered QUIC attempt ends after 0.5 s
    )
    sink = await send_through_late_worker(conn, start_worker)
    assert sink.payloads("p", "early", 0) == [b"m%d" % i for i in range(20)]
    assert conn.stats.connections == 1 and conn.stats.retries >= 2


async def test_a_deadline_that_runs_out_names_the_attempts_and_the_last_error() -> None:
    port = free_port(socket.SOCK_STREAM)
    conn = Connector(f"tcp://127.0.0.1:{port}", connect_timeout=0.5, backoff=BACKOFF)
    try:
        await conn.connect()
    except ConnectionError as exc:
        message = str(exc)
    else:
        raise AssertionError("connected to nothing")
    n = conn.stats.retries
    assert n >= 2
    assert re.fullmatch(
        rf"no handshake with tcp://127\.0\.0\.1:{port} within 0\.5 s "
        rf"\({n} failed attempts, last: connect: \[Errno 111\] Connect call failed "
        rf"\('127\.0\.0\.1', {port}\)\)",
        message,
    ), message


async def produce(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aqueduct.connector.producer.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


async def test_produce_started_before_the_worker_reports_its_retries() -> None:
    import json

    port = free_port(socket.SOCK_STREAM)
    proc = await produce(
        f"tcp://127.0.0.1:{port}", "--program", "cli", "--instance", "early", "--count", "30", "--json",
        "--first-stream-id", "0",
    )
    try:
        # The worker comes up only once a progress line said the producer is retrying (a loaded
        # machine may take seconds to start the producer at all).
        assert proc.stderr is not None
        early = await asyncio.wait_for(proc.stderr.readuntil(b" retries (connect: "), TIMEOUT)
        sink = MemorySink()
        server = await serve_tcp("127.0.0.1", port, sink)
        try:
            code, out, rest = await finish(proc, TIMEOUT)
            err = early.decode() + rest
        finally:
            await server.close()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["sent"] == 30 and summary["acked"] == 30 and summary["errors"] == []
    assert summary["retries"] >= 1 and summary["connections"] == 1
    assert re.search(rf"connecting to tcp://127\.0\.0\.1:{port}: \d+ retries \(connect: ", err), err
    assert len(sink.payloads("cli", "early", 0)) == 30


async def test_produce_connect_timeout_gives_the_exact_error() -> None:
    port = free_port(socket.SOCK_STREAM)
    code, _, err = await finish(
        await produce(f"tcp://127.0.0.1:{port}", "--count", "1", "--connect-timeout", "0.5", "--quiet"), TIMEOUT
    )
    assert code == 1
    assert re.fullmatch(
        rf"aqueduct-produce: connection: no handshake with tcp://127\.0\.0\.1:{port} within 0\.5 s "
        rf"\(\d+ failed attempts?, last: connect: \[Errno 111\] Connect call failed "
        rf"\('127\.0\.0\.1', {port}\)\)\n",
        err,
    ), err


async def test_a_worker_that_accepts_but_never_answers_is_retried() -> None:
    """An overloaded listener (connection accepted, no OK) must not hang the first attempt."""
    held: list[asyncio.StreamWriter] = []
    server = await asyncio.start_server(lambda r, w: held.append(w), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = Connector(f"tcp://127.0.0.1:{port}", connect_timeout=1.0, idle_timeout=0.2, backoff=BACKOFF)
    try:
        try:
            await asyncio.wait_for(conn.connect(), TIMEOUT)
        except ConnectionError as exc:
            message = str(exc)
        else:
            raise AssertionError("connected to a silent listener")
    finally:
        for w in held:
            w.close()
        server.close()
        await server.wait_closed()
    assert conn.stats.retries >= 2
    assert re.fullmatch(
        rf"no handshake with tcp://127\.0\.0\.1:{port} within 1\.0 s "
        rf"\({conn.stats.retries} failed attempts, last: no OK within 0\.2 s\)",
        message,
    ), message


async def test_connections_reset_before_the_hello_are_retried_not_fatal() -> None:
    """A worker that resets connections as it accepts them (a bridge being killed, a
    listen queue overflowing): however early the reset comes, even before the HELLO is
    written, the connector retries; once a real worker listens there, it connects."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.05)
    port = listener.getsockname()[1]
    stop = threading.Event()

    def reset_everything() -> None:
        while not stop.is_set():
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:  # the listener was closed: done
                return
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # RST, at once

    resetter = threading.Thread(target=reset_everything, daemon=True)
    resetter.start()
    conns = [Connector(f"tcp://127.0.0.1:{port}", instance=f"p{i}", backoff=(0.001, 0.01)) for i in range(20)]
    connecting = [asyncio.ensure_future(c.connect()) for c in conns]
    try:
        for c in conns:
            await until_retried(c, 10)
        stop.set()
        await asyncio.get_running_loop().run_in_executor(None, resetter.join, TIMEOUT)
        listener.close()
        server = await serve_tcp("127.0.0.1", port, MemorySink())
        try:
            await asyncio.wait_for(asyncio.gather(*connecting), TIMEOUT)
            assert all(c.connected for c in conns)
        finally:
            await server.close()
    finally:
        stop.set()
        listener.close()
        for task in connecting:
            task.cancel()
        for c in conns:
            await c.close()
