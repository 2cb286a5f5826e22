"""UDP endpoints that read every waiting datagram per wake-up, then flush once.

asyncio's datagram transport reads one datagram per readiness callback, and
aioquic's protocol flushes (builds and sends packets, here also hands the
core's actions and events over) after each one. A busy receiver usually
finds several datagrams waiting; reading them all first and flushing each
connection once per batch saves a pass of aioquic's packet builder and of
our driver's hand-over per datagram, and sends one ACK where there were
several (native QUIC stacks do the same with ``recvmmsg``). A batch is
bounded (``MAX_BATCH``) so one busy socket cannot starve the event loop.

The transport still owns the socket (``sendto``, ``close``); only its
reader callback is replaced. asyncio's public ``add_reader`` refuses a file
descriptor a transport uses, so this goes through the selector loop's
``_remove_reader``/``_add_reader`` (what the transport itself calls); on a
loop without them (not asyncio's selector loop) the transport keeps its own
reader and everything works, one flush per datagram.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
from collections.abc import Callable
from typing import Any, Protocol

logger = logging.getLogger(__name__)

MAX_BATCH = 32
MAX_DATAGRAM = 65_535


class Flushable(Protocol):
    def transmit(self) -> None: ...


class ReadBatch:
    """The datagrams of one wake-up, and the connections waiting to flush after them."""

    def __init__(self) -> None:
        self.active = False
        self._waiting: dict[int, Flushable] = {}
        self._sock: socket.socket | None = None
        self._transport: asyncio.DatagramTransport | None = None
        self._protocol: asyncio.DatagramProtocol | None = None

    def defer(self, conn: Flushable) -> None:
        """``conn.transmit()`` once this batch has been read."""
        self._waiting[id(conn)] = conn

    def attach(
        self, sock: socket.socket, transport: asyncio.DatagramTransport, protocol: asyncio.DatagramProtocol
    ) -> None:
        self._sock, self._transport, self._protocol = sock, transport, protocol

    def read_ready(self) -> None:
        sock, transport, protocol = self._sock, self._transport, self._protocol
        assert sock is not None and transport is not None and protocol is not None
        if transport.is_closing():
            return
        self.active = True
        try:
            for _ in range(MAX_BATCH):
                try:
                    data, addr = sock.recvfrom(MAX_DATAGRAM)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:  # e.g. an ICMP port unreachable, as asyncio reports it
                    protocol.error_received(exc)
                    break
                protocol.datagram_received(data, addr)
        finally:
            self.active = False
            waiting, self._waiting = self._waiting, {}
            for conn in waiting.values():
                conn.transmit()


#: Linux's ``SO_RCVBUFFORCE`` (Python's socket module names no constant): ``SO_RCVBUF`` beyond
#: ``net.core.rmem_max``, allowed to a process with ``CAP_NET_ADMIN`` (root)
SO_RCVBUFFORCE = 33


def ask_receive_buffer(sock: socket.socket, size: int) -> int:
    """Ask for ``size`` bytes of receive queue; the bytes the kernel granted (Linux doubles them for its overhead).

    ``SO_RCVBUF`` is capped at ``net.core.rmem_max`` (4 MB on many hosts,
    208 kB by default); a process allowed to (root, ``CAP_NET_ADMIN``)
    gets the whole ``size`` with ``SO_RCVBUFFORCE``, as quic-go does. A
    process that is not keeps what ``SO_RCVBUF`` gave: the caller says so.
    """
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
    granted = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    if granted < size and sys.platform == "linux":
        with contextlib.suppress(PermissionError):
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)
            granted = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    return granted


async def open_udp(
    protocol_factory: Callable[[], Any],
    local_addr: tuple[str, int],
    family: int,
    batch: ReadBatch,
    receive_buffer: int | None = None,
) -> tuple[asyncio.DatagramTransport, Any]:
    """Bind a UDP socket to ``local_addr`` and serve it with ``batch`` as its reader.

    ``receive_buffer`` is the receive queue asked for (:func:`ask_receive_buffer`);
    a warning says when the kernel granted less, and how to raise it.
    """
    loop = asyncio.get_running_loop()
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        if receive_buffer is not None and (granted := ask_receive_buffer(sock, receive_buffer)) < receive_buffer:
            logger.warning(
                "UDP receive buffer: %d kB granted of the %d kB asked; datagrams that arrive while the loop "
                "is busy are dropped once it is full (raise net.core.rmem_max to %d)",
                granted // 1024, receive_buffer // 1024, receive_buffer,
            )  # fmt: skip
        sock.bind(local_addr)
        transport, protocol = await loop.create_datagram_endpoint(protocol_factory, sock=sock)
    except BaseException:
        sock.close()
        raise
    batch.attach(sock, transport, protocol)
    remove, add = getattr(loop, "_remove_reader", None), getattr(loop, "_add_reader", None)
    if remove is not None and add is not None:
        # The transport added its one-datagram reader before create_datagram_endpoint returned.
        remove(sock.fileno())
        add(sock.fileno(), batch.read_ready)
    return transport, protocol
