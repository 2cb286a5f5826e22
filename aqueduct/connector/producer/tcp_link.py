"""Producer side of the connector protocol over plain TCP: :class:`TcpLink`.

For producers that cannot speak QUIC (spec section 3, last point): one frame
sequence per connection, driven by :mod:`.client`. The worker side is
:mod:`aqueduct.connector.worker.tcp_listener`.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence

from aqueduct.connector.carrying import READ_SIZE
from aqueduct.connector.connector_session import Outgoing


class TcpLink:
    """Connector side of one TCP connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, host: str, port: int, limit: float | None = None) -> TcpLink:
        """Connect; with ``limit``, a bridge silent that long is given up on (``TimeoutError``, ``OSError``).

        The connect then gives up after ``limit`` seconds, and so does the
        connection once bytes it sent went unacknowledged that long
        (``TCP_USER_TIMEOUT``) or, while idle, once keep-alive probes every
        third of it go unanswered: a bridge whose host died (nothing resets
        the connection) is noticed within about ``limit`` seconds.
        """
        if limit is None:
            reader, writer = await asyncio.open_connection(host, port)
            return cls(reader, writer)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), limit)
        _bound_silence(writer.get_extra_info("socket"), limit)
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


def _bound_silence(sock: socket.socket | None, limit: float) -> None:
    """Drop the connection after ``limit`` seconds of silence from the peer (Linux's TCP options, where present)."""
    if sock is None:
        return
    probe = max(1, int(limit / 3))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", probe), ("TCP_KEEPINTVL", probe), ("TCP_KEEPCNT", 3),
                        ("TCP_USER_TIMEOUT", int(limit * 1000))):  # fmt: skip
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)
