"""Plain TCP transports for the connector protocol (one frame sequence per connection).

For producers that cannot speak QUIC (spec section 3, last point). The
connector side is a :class:`TcpLink` (driven by :mod:`.client`); the worker
side is :func:`serve_tcp`, which runs a worker session per connection and
hands its events to a sink (see :mod:`.worker_server`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aqueduct.connector.connector_session import Outgoing
from aqueduct.connector.worker_server import SessionFactory, WorkerPeer, WorkerServer, WorkerSink
from aqueduct.connector.worker_session import WorkerConfig, WorkerSession

READ_SIZE = 256 * 1024
LISTEN_BACKLOG = 4096
"""Connections the kernel may hold for the worker before it accepts them.

asyncio's default (100) overflows when a fleet reconnects at once after a
bridge restart: the kernel then falls back to SYN cookies and drops
handshakes it cannot queue, and producers sit in connections the worker
never accepts until their timeouts. Linux caps it at ``net.core.somaxconn``."""


class TcpLink:
    """Connector side of one TCP connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, host: str, port: int) -> TcpLink:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def send(self, frames: Sequence[Outgoing]) -> None:
        """Write every frame in one go (batching) and wait for the socket buffer."""
        self._writer.write(b"".join(data for _, data in frames))
        await self._writer.drain()

    async def receive(self) -> bytes:
        """Next bytes from the worker; ``b""`` at end of stream."""
        return await self._reader.read(READ_SIZE)

    async def close(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (ConnectionError, OSError):
            pass


async def serve_tcp(
    host: str,
    port: int,
    sink: WorkerSink,
    config: WorkerConfig | None = None,
    session_factory: SessionFactory = WorkerSession,
) -> WorkerServer:
    """Listen on ``host:port`` (0 = any free port); each connection feeds ``sink``.

    ``session_factory`` picks the wire: the seed protocol's
    :class:`WorkerSession` by default, or the Wallaroo v3 session.
    """
    worker_config = config or WorkerConfig()
    server: WorkerServer

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def send(data: bytes) -> None:
            writer.write(data)
            await writer.drain()

        peer = WorkerPeer(sink, worker_config, send, writer.close, session_factory)
        address = writer.get_extra_info("peername")
        peer.remote = f"tcp {address[0]}:{address[1]}" if address else "tcp"

        async def read_loop() -> None:
            while not peer.ended:
                data = await reader.read(READ_SIZE)
                if not data:
                    return
                await peer.receive_data(data)

        await server.run_peer(peer, read_loop())

    listener = await asyncio.start_server(on_connection, host, port, backlog=LISTEN_BACKLOG)

    async def close_listener() -> None:
        listener.close()

    server = WorkerServer(close_listener, listener.sockets[0].getsockname()[:2])
    return server
