"""Worker side of the connector protocol over TCP, plain or TLS: :func:`serve_tcp`.

One worker session per connection, its events handed to a sink (see
:mod:`.server`). With TLS (:func:`aqueduct.connector.tls.server_context`)
a verified client certificate's subject goes to the session as part of
its credential. The producer side is
:mod:`aqueduct.connector.producer.tcp_link`.
"""

from __future__ import annotations

import asyncio
import ssl

from aqueduct.connector.carrying import READ_SIZE
from aqueduct.connector.tls import certificate_required, peer_certificate_subject
from aqueduct.connector.worker.server import SessionFactory, WorkerPeer, WorkerServer, WorkerSink
from aqueduct.connector.worker_session import WorkerConfig, WorkerSession

LISTEN_BACKLOG = 4096
"""Connections the kernel may hold for the worker before it accepts them.

asyncio's default (100) overflows when a fleet reconnects at once after a
bridge restart: the kernel then falls back to SYN cookies and drops
handshakes it cannot queue, and producers sit in connections the worker
never accepts until their timeouts. Linux caps it at ``net.core.somaxconn``."""


async def serve_tcp(
    host: str,
    port: int,
    sink: WorkerSink,
    config: WorkerConfig | None = None,
    session_factory: SessionFactory = WorkerSession,
    tls: ssl.SSLContext | None = None,
) -> WorkerServer:
    """Listen on ``host:port`` (0 = any free port); each connection feeds ``sink``.

    ``session_factory`` picks the wire: the seed protocol's
    :class:`WorkerSession` by default, or the Wallaroo v3 session.
    ``tls``: the listener's TLS context (None: plaintext).
    """
    worker_config = config or WorkerConfig()
    required = certificate_required(tls)  # mutual TLS: HELLO without a verified certificate is refused
    server: WorkerServer

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def send(data: bytes) -> None:
            writer.write(data)
            await writer.drain()

        subject = peer_certificate_subject(writer.get_extra_info("ssl_object"))
        peer = WorkerPeer(sink, worker_config, send, writer.close, session_factory, subject, required)
        address = writer.get_extra_info("peername")
        scheme = "tls" if tls is not None else "tcp"
        peer.remote = f"{scheme} {address[0]}:{address[1]}" if address else scheme

        async def read_loop() -> None:
            while not peer.ended:
                data = await reader.read(READ_SIZE)
                if not data:
                    return
                await peer.receive_data(data)

        await server.run_peer(peer, read_loop())

    listener = await asyncio.start_server(on_connection, host, port, backlog=LISTEN_BACKLOG, ssl=tls)

    async def close_listener() -> None:
        listener.close()

    server = WorkerServer(close_listener, listener.sockets[0].getsockname()[:2])
    return server
