"""The seam between the Aqueduct driver and a QUIC stack, both ways.

:class:`~aqueduct.runtime.driver.core_driver.Driver` runs the sans-IO core
over one QUIC connection without knowing which stack carries it. It asks
the stack for exactly what :class:`QuicTransport` lists, and the stack's
backend calls exactly what :class:`TransportDriver` lists of the driver
(the input calls, then ``flush`` once after each burst of them): neither
side imports the other. Everything a stack needs beyond that (its
configuration, TLS hooks, its server, its private members) stays in its
backend's modules under :mod:`aqueduct.runtime.backends`.
``tests/unit/test_transport_seam.py`` fails when any other module imports a
QUIC stack, ``tests/unit/test_layering.py`` when anything but the endpoints
imports a backend.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio

ALPN = "aqueduct"
"""The TLS application protocol every backend offers and accepts."""
MAX_DATAGRAM_FRAME_SIZE = 65536
"""Largest DATAGRAM frame we accept; the payload that fits is further bounded
by the path's packet size, which the backend reports (``datagram_limit``)."""
NO_REASON = "no reason given"
"""What a connection's end says where its close carried no reason phrase."""


@dataclass(frozen=True)
class ClientOptions:
    """What ``connect()`` asks of a backend's ``dial`` besides the address."""

    cafile: str | os.PathLike[str] | None = None
    verify: bool = True
    certfile: str | os.PathLike[str] | None = None
    keyfile: str | os.PathLike[str] | None = None
    server_name: str | None = None
    idle_timeout: float = 60.0
    timeout: float = 30.0  # for the Aqueduct handshake
    keepalive: bool = True
    token: bytes = b""  # the Initial's QUIC token: a busy server's turn (runtime.retry_hint), if one was named


@dataclass(frozen=True)
class ServerOptions:
    """What ``serve()`` asks of a backend's ``listen`` besides the address."""

    certfile: str | os.PathLike[str]
    keyfile: str | os.PathLike[str] | None = None
    cafile: str | os.PathLike[str] | None = None  # require client certificates signed by it
    idle_timeout: float = 60.0
    max_handshakes: int | None = None  # handshakes in progress at once (None: the backend's default)
    keepalive: bool = False


class QuicTransport(Protocol):
    """One QUIC connection of a stack, as the driver uses it.

    Calls that queue something (stream data, datagrams, resets, a close, a
    PING) only queue it; :meth:`send_packets` puts what is queued on the
    wire. The driver calls :meth:`transmit` when it has something to send
    outside a flush the stack started (a timer, an application call); the
    backend then calls the driver's ``flush`` now or, while it is still
    reading a batch of datagrams, once that batch ends.
    """

    is_client: bool
    pings_itself: bool
    """The stack sends keep-alive PINGs on its own (configured when the connection
    was made): the driver then arms no keepalive timer of its own."""

    def peer_address(self) -> tuple[str, int] | None:
        """The peer's (host, port), for log lines; None where the stack does not know it (yet)."""
        ...

    def peer_certificate_subject(self) -> str | None:
        """The subject (RFC 4514) of the certificate the peer presented and the stack verified, else None."""
        ...

    def datagram_limit(self) -> int | None:
        """The largest datagram payload that always fits one packet; None if the peer has no datagrams."""
        ...

    def smoothed_rtt(self) -> float | None:
        """The smoothed RTT in seconds, None before the first sample."""
        ...

    def idle_timeout(self) -> float:
        """The negotiated idle timeout in seconds."""
        ...

    def pending_datagrams(self) -> int:
        """Datagrams handed over that have not left in a packet yet."""
        ...

    def send_stream_data(self, stream_id: int, data: bytes, end_stream: bool) -> None: ...

    def reset_stream(self, stream_id: int, error_code: int) -> None:
        """Reset a stream; a stream the stack already forgot (all delivered) is left alone."""
        ...

    def send_datagram(self, data: bytes) -> None: ...

    def send_ping(self, uid: int) -> None:
        """Queue a PING (the driver's keepalive, unless the stack ``pings_itself``)."""
        ...

    def queue_close(self, error_code: int, reason: str) -> None:
        """Close the connection (an application close) at the next :meth:`send_packets`.

        Only queued: the driver calls it inside a flush. (Not ``close``: a
        stack's own ``close()`` may also send, and its server calls that.)
        """
        ...

    def transmit(self) -> None:
        """Have the driver flush: now, or after the batch of datagrams being read."""
        ...

    def send_packets(self) -> None:
        """Build and send the packets for everything queued."""
        ...

    def stats(self) -> dict[str, Any]:
        """The stack's view of the connection: RTT, bytes in flight, congestion window, packets."""
        ...

    async def wait_closed(self) -> None:
        """Wait until the QUIC connection is gone (closed, drained or timed out)."""
        ...


class TransportDriver(Protocol):
    """The driver of one connection, as a backend feeds it (what the stack tells the core)."""

    ready: asyncio.Future[None]
    """Done when the Aqueduct handshake completed (or failed with the reason)."""

    def datagram_received(self, data: bytes) -> None: ...

    def stream_data_received(self, stream_id: int, data: bytes, end_stream: bool) -> None: ...

    def stream_reset_received(self, stream_id: int, error_code: int) -> None: ...

    def quic_handshake_completed(self) -> None: ...

    def quic_terminated(self, error_code: int, reason: str) -> None: ...

    def flush(self) -> None:
        """Act on the input of the burst just fed: run the core, send what it queued."""
        ...

    async def wait_ready(self, timeout: float, where: str, abort: Callable[[], None]) -> None:
        """Wait for :attr:`ready`; on a timeout call ``abort`` and raise ``ConnectionLost``."""
        ...


MakeDriver = Callable[[QuicTransport], TransportDriver]
"""What a backend's ``listen`` and ``dial`` take: a driver for each new QUIC connection."""
