"""A server bounds the QUIC handshakes in progress; a client beyond the bound is refused, then retries.

Real loopback UDP. The client that holds the only handshake slot is an
aioquic connection driven by hand that never answers the server's
handshake (a stalled client in a storm); the next client's Initial gets
CONNECTION_REFUSED at once, and a ``Connector`` refused the same way
connects by itself once the server gave up on the stalled handshake
(long before the connection's idle timeout).
"""

from __future__ import annotations

import asyncio
import re
import socket

import pytest
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated
from aioquic.quic.packet import QuicErrorCode

from aqueduct.connector.errors import WorkerBusy
from aqueduct.connector.producer.client import Connector
from aqueduct.connector.worker.memory_sink import MemorySink
from aqueduct.runtime.backends import quic_server
from aqueduct.runtime.backends.quic_server import BoundedQuicServer
from aqueduct.runtime.backends.tls import client_configuration
from aqueduct.runtime.retry_hint import window_named
from aqueduct.wire.modes import Mode

TIMEOUT = 30.0


def initial(port: int, sock: socket.socket, token: bytes = b"") -> QuicConnection:
    """Send a fresh client's Initial (carrying ``token``) to the server from ``sock``; return the (stalled) client."""
    quic = QuicConnection(configuration=client_configuration("localhost", None, False, None, None, token=token))
    quic.connect(("127.0.0.1", port), now=0.0)
    for data, _ in quic.datagrams_to_send(now=0.0):
        sock.sendto(data, ("127.0.0.1", port))
    return quic


async def reply(sock: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    return await asyncio.wait_for(loop.sock_recv(sock, 65_535), TIMEOUT)


async def refusal(port: int, sock: socket.socket, token: bytes = b"") -> str:
    """The reason phrase of the server's CONNECTION_REFUSED to a new Initial carrying ``token``."""
    client = initial(port, sock, token)
    client.receive_datagram(await reply(sock), ("127.0.0.1", port), now=0.0)
    timer = client.get_timer()
    assert timer is not None
    client.handle_timer(timer)  # aioquic reports the close once draining is over
    closes = []
    while (event := client.next_event()) is not None:
        if isinstance(event, ConnectionTerminated):
            closes.append(event)
    assert [c.error_code for c in closes] == [QuicErrorCode.CONNECTION_REFUSED]
    return closes[0].reason_phrase


async def test_initial_beyond_the_bound_is_refused_and_the_connector_retries(certs, monkeypatch) -> None:
    from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct

    monkeypatch.setattr(quic_server, "HANDSHAKE_TIMEOUT", 0.5)  # the stalled one's slot frees after 0.5 s
    server = await serve_aqueduct(
        "127.0.0.1", 0, MemorySink(), certfile=certs.server_cert, keyfile=certs.server_key,
        max_handshakes=1, idle_timeout=TIMEOUT * 2,  # the idle timeout never frees it here
    )
    stalled, refused = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
    try:
        for s in (stalled, refused):
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
        initial(server.port, stalled)
        await reply(stalled)  # the server answered: its handshake is under way
        reason = await refusal(server.port, refused)
        assert re.fullmatch(r"busy: retry within 0\.25 s; turn [0-9a-f]{16}", reason)  # its turn is the first

        conn = Connector(
            f"aqueduct://127.0.0.1:{server.port}", cafile=str(certs.ca), backoff=(0.05, 0.5)
        )
        try:
            await asyncio.wait_for(conn.connect(), TIMEOUT)
            assert conn.connected
        finally:
            await conn.close()
    finally:
        stalled.close()
        refused.close()
        await server.close()


async def test_a_refused_connector_link_says_how_long_to_spread_its_retry_over(certs) -> None:
    from aqueduct.connector.producer.aqueduct_link import AqueductLink
    from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct

    server = await serve_aqueduct(
        "127.0.0.1", 0, MemorySink(), certfile=certs.server_cert, keyfile=certs.server_key,
        max_handshakes=1, idle_timeout=TIMEOUT * 2,
    )
    stalled = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        stalled.bind(("127.0.0.1", 0))
        stalled.setblocking(False)
        initial(server.port, stalled)
        await reply(stalled)  # the only slot is taken
        with pytest.raises(WorkerBusy, match="busy: retry within 0.25 s") as refused:
            await asyncio.wait_for(
                AqueductLink.open("127.0.0.1", server.port, lambda _: Mode.ORDERED, str(certs.ca)), TIMEOUT
            )
        assert refused.value.retry_within == 0.25
    finally:
        stalled.close()
        await server.close()


async def test_a_client_refused_again_keeps_its_turn_and_is_admitted_when_it_comes(certs, monkeypatch) -> None:
    """The turn a refusal names, sent back as the Initial's QUIC token, keeps the client's place in the queue.

    The stalled handshake holds the only slot throughout (it never expires
    here): the Connector gets in at its turn, beyond the bound.
    """
    from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct

    monkeypatch.setattr(quic_server, "HANDSHAKE_TIMEOUT", TIMEOUT * 10)
    server = await serve_aqueduct(
        "127.0.0.1", 0, MemorySink(), certfile=certs.server_cert, keyfile=certs.server_key,
        max_handshakes=1, idle_timeout=TIMEOUT * 2,
    )
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]
    conn = Connector(f"aqueduct://127.0.0.1:{server.port}", cafile=str(certs.ca))
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
        initial(server.port, socks[0])
        await reply(socks[0])  # the only slot is taken, and stays taken
        windows = [window_named(await refusal(server.port, socks[1])) for _ in range(20)]  # 20 newcomers: 5 s of turns
        last = windows[-1]
        assert last is not None and len({w.turn for w in windows if w is not None}) == 20
        again = window_named(await refusal(server.port, socks[2], last.turn))  # back too soon: refused again
        assert again is not None and again.turn == last.turn  # the same place: the queue did not grow
        assert 0.0 < again.not_before <= last.not_before
        await asyncio.wait_for(conn.connect(), TIMEOUT)  # refused, given a turn, admitted when it came
        assert conn.connected and conn.stats.retries >= 1
    finally:
        await conn.close()
        for s in socks:
            s.close()
        await server.close()


async def test_a_slow_client_that_still_sends_keeps_its_slot(certs, monkeypatch) -> None:
    """Only silence expires a handshake: a client sending every 0.25 s holds its slot for three timeouts."""
    from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct

    monkeypatch.setattr(quic_server, "HANDSHAKE_TIMEOUT", 0.5)
    server = await serve_aqueduct(
        "127.0.0.1", 0, MemorySink(), certfile=certs.server_cert, keyfile=certs.server_key,
        max_handshakes=1, idle_timeout=TIMEOUT * 2,
    )
    slow, other = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
    try:
        for s in (slow, other):
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
        client = QuicConnection(configuration=client_configuration("localhost", None, False, None, None))
        client.connect(("127.0.0.1", server.port), now=0.0)
        first = [data for data, _ in client.datagrams_to_send(now=0.0)]
        for data in first:
            slow.sendto(data, ("127.0.0.1", server.port))
        await reply(slow)  # its handshake holds the only slot
        for _ in range(6):  # 1.5 s: its Initial again every 0.25 s (a client probing, as a live one does)
            await asyncio.sleep(0.25)
            for data in first:
                slow.sendto(data, ("127.0.0.1", server.port))
        assert (await refusal(server.port, other)).startswith("busy: retry within")  # still held, not expired
    finally:
        slow.close()
        other.close()
        await server.close()


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="^max_handshakes must be at least 1, got 0$"):
        BoundedQuicServer(configuration=None, max_handshakes=0)  # type: ignore[arg-type]


