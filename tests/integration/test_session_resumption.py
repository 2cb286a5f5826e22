"""A client reconnecting to the same aioquic server resumes its TLS session; everything above TLS still runs.

Real QUIC over loopback, an aioquic client (picoquic's server too). The process keeps the newest session ticket per
server (host, port, SNI): the second ``connect`` to a server presents it
and the server counts a resumed handshake (no certificate work). A
resumed connection still runs the Aqueduct handshake and the worker's
cookie check; a ticket the server never issued (another server, or this
one before a restart) falls back to a full handshake without an error;
a server requiring client certificates issues no tickets.
"""

from __future__ import annotations

import asyncio

import pytest
from aioquic.quic.connection import QuicConnection

import aqueduct.runtime as rt
from aqueduct.connector.errors import ConnectorRefused
from aqueduct.connector.producer.client import Connector
from aqueduct.connector.worker.memory_sink import MemorySink
from aqueduct.connector.worker_session import WorkerConfig
from aqueduct.runtime.backends import aioquic as aioquic_backend
from aqueduct.runtime.backends.session_tickets import CLIENT_TICKETS

TIMEOUT = 30.0


async def connect_and_send(port: int, server: rt.Server, certs, **options) -> bool:
    """Connect, carry one message to the server, close; whether the TLS session was resumed."""
    tx = await rt.connect("127.0.0.1", port, cafile=certs.ca, timeout=TIMEOUT, **options)
    try:
        conn = await asyncio.wait_for(server.accept(), TIMEOUT)
        await tx.send(b"over the resumed session?")
        assert await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT) == b"over the resumed session?"
        return tx.connection.stats()["quic"]["session_resumed"]
    finally:
        await tx.connection.close()


async def test_a_reconnect_resumes_and_the_server_counts_it(certs, server_backend, server_host) -> None:
    async with await rt.serve(
        server_host, 0, certfile=certs.server_cert, keyfile=certs.server_key, backend=server_backend
    ) as server:
        assert await connect_and_send(server.port, server, certs) is False
        assert await connect_and_send(server.port, server, certs) is True
        assert await connect_and_send(server.port, server, certs) is True  # each connection is issued a new ticket
        if server_backend == "aioquic":  # picoquic's server counts nothing
            assert dict(server.completed_handshakes) == {"full": 1, "resumed": 2}


async def test_a_ticket_from_another_server_falls_back_to_a_full_handshake(certs) -> None:
    async with await rt.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key) as first:
        await connect_and_send(first.port, first, certs)
        ticket = CLIENT_TICKETS.take(("127.0.0.1", first.port, "127.0.0.1"))
    assert ticket is not None
    async with await rt.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key) as second:
        CLIENT_TICKETS.put(("127.0.0.1", second.port, "127.0.0.1"), ticket)  # what a restarted server sees
        assert await connect_and_send(second.port, second, certs) is False
        assert dict(second.completed_handshakes) == {"full": 1}


async def test_a_server_requiring_client_certificates_issues_no_tickets(certs) -> None:
    async with await rt.serve(
        "127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key, cafile=certs.ca
    ) as server:
        client_cert = {"certfile": certs.client_cert, "keyfile": certs.client_key}
        assert await connect_and_send(server.port, server, certs, **client_cert) is False
        assert await connect_and_send(server.port, server, certs, **client_cert) is False
        assert dict(server.completed_handshakes) == {"full": 2}


@pytest.fixture
def client_connections(monkeypatch) -> list[QuicConnection]:
    """Every aioquic client connection made from now on (the real class, recorded)."""
    made: list[QuicConnection] = []

    class Recorded(QuicConnection):
        def __init__(self, **kwargs) -> None:
            super().__init__(**kwargs)
            made.append(self)

    monkeypatch.setattr(aioquic_backend, "QuicConnection", Recorded)
    return made


async def test_a_resumed_session_still_has_its_cookie_checked(certs, client_connections) -> None:
    from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct

    server = await serve_aqueduct(
        "127.0.0.1", 0, MemorySink(), WorkerConfig(cookie=b"secret"),
        certfile=certs.server_cert, keyfile=certs.server_key,
    )  # fmt: skip
    url = f"aqueduct://127.0.0.1:{server.port}"
    try:
        async with Connector(url, cookie=b"secret", cafile=str(certs.ca), connect_timeout=TIMEOUT):
            pass
        with pytest.raises(ConnectorRefused, match="^bad cookie$"):
            async with Connector(url, cookie=b"nope", cafile=str(certs.ca), connect_timeout=TIMEOUT):
                pass
        async with Connector(url, cookie=b"secret", cafile=str(certs.ca), connect_timeout=TIMEOUT):
            pass
    finally:
        await server.close()
    resumed = [quic.tls.session_resumed for quic in client_connections]
    assert resumed[0] is False
    assert resumed[1] is True  # the refused one: TLS resumed, the cookie still checked
    assert len(resumed) == 3
