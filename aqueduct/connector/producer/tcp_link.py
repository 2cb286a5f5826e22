"""Producer side of the connector protocol over plain TCP: :class:`TcpLink`.

For producers that cannot speak QUIC (spec section 3, last point): one frame
sequence per connection, driven by :mod:`.client`. The worker side is
:mod:`aqueduct.connector.worker.tcp_listener`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aqueduct.connector.carrying import READ_SIZE
from aqueduct.connector.connector_session import Outgoing


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
