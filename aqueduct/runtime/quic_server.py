"""aioquic's server, bounded for handshake storms.

When thousands of clients connect at once (a fleet restarting after an
outage), aioquic's ``QuicServer`` accepts every Initial and runs every TLS
handshake on the event loop at the same time. Each then progresses so
slowly that many time out, the clients retry, and the storm feeds itself;
meanwhile the loop is too busy for the established sessions.

:class:`BoundedQuicServer` keeps at most ``max_handshakes`` handshakes in
progress. An Initial that would open one more is answered at once with a
CONNECTION_CLOSE carrying ``CONNECTION_REFUSED`` (RFC 9000 section 20.1),
built from the Initial keys alone (no TLS work, no connection state): the
client sees a refused connection and retries with its own backoff, instead
of waiting for an idle timeout. Handshakes that finished (or failed) free
their slot, and one that takes longer than ``HANDSHAKE_TIMEOUT`` is
closed (its client gave up or is too slow to finish); the count is pruned
lazily, when it is full, so the check costs at most ``max_handshakes``
steps.

It also makes forgetting an ended connection cost O(its connection ids)
instead of a scan of every connection's ids (aioquic's
``_connection_terminated``), which made N connections ending together
quadratic.
"""

from __future__ import annotations

from typing import Any

from aioquic.asyncio.server import QuicServer
from aioquic.buffer import Buffer
from aioquic.quic.configuration import SMALLEST_MAX_DATAGRAM_SIZE
from aioquic.quic.connection import TRANSPORT_CLOSE_FRAME_CAPACITY, NetworkAddress
from aioquic.quic.crypto import CryptoPair
from aioquic.quic.packet import QuicErrorCode, QuicFrameType, QuicPacketType, pull_quic_header
from aioquic.quic.packet_builder import QuicPacketBuilder

from aqueduct.runtime import aioquic_internals

DEFAULT_MAX_HANDSHAKES = 64
"""Handshakes a server runs at once; more wait (refused, retried by the client)."""
HANDSHAKE_TIMEOUT = 15.0
"""Seconds a handshake may hold its slot. A client that gave up (its own
attempt timed out, it retries with a new connection) leaves its half-done
handshake behind until the idle timeout (a minute on the bridge): without
this, a storm fills every slot with abandoned handshakes."""


def encode_refusal(version: int, client_dcid: bytes, client_scid: bytes) -> bytes:
    """A server Initial closing the connection with CONNECTION_REFUSED.

    Its keys derive from the Destination Connection ID the client chose,
    so no connection state is needed to send it.
    """
    crypto = CryptoPair()
    crypto.setup_initial(cid=client_dcid, is_client=False, version=version)
    builder = QuicPacketBuilder(
        host_cid=client_dcid,
        is_client=False,
        max_datagram_size=SMALLEST_MAX_DATAGRAM_SIZE,
        peer_cid=client_scid,
        version=version,
    )
    builder.start_packet(QuicPacketType.INITIAL, crypto)
    buf = builder.start_frame(QuicFrameType.TRANSPORT_CLOSE, capacity=TRANSPORT_CLOSE_FRAME_CAPACITY)
    buf.push_uint_var(QuicErrorCode.CONNECTION_REFUSED)
    buf.push_uint_var(QuicFrameType.PADDING)
    buf.push_uint_var(0)
    datagrams, _ = builder.flush()
    return datagrams[0]


class BoundedQuicServer(QuicServer):
    """``QuicServer`` with at most ``max_handshakes`` handshakes in progress."""

    def __init__(self, *, max_handshakes: int = DEFAULT_MAX_HANDSHAKES, **kwargs: Any) -> None:
        if max_handshakes < 1:
            raise ValueError(f"max_handshakes must be at least 1, got {max_handshakes}")
        super().__init__(**kwargs)
        self.max_handshakes = max_handshakes
        self._handshaking: dict[Any, float] = {}  # protocol -> when its handshake began
        self.refused = 0  # Initials answered with CONNECTION_REFUSED
        self.expired = 0  # handshakes closed after HANDSHAKE_TIMEOUT

    def datagram_received(self, data: bytes | str, addr: NetworkAddress) -> None:
        assert isinstance(data, bytes)
        try:
            header = pull_quic_header(
                Buffer(data=data), host_cid_length=self._configuration.connection_id_length
            )
        except ValueError:
            return
        known = header.destination_cid in self._protocols
        if not known and header.packet_type == QuicPacketType.INITIAL and self._full():
            if header.version in self._configuration.supported_versions:
                assert self._transport is not None
                self._transport.sendto(
                    encode_refusal(header.version, header.destination_cid, header.source_cid), addr
                )
                self.refused += 1
            return
        super().datagram_received(data, addr)
        if not known:
            protocol = self._protocols.get(header.destination_cid)
            if protocol is not None:
                self._handshaking[protocol] = self._loop.time()

    def _full(self) -> bool:
        if len(self._handshaking) < self.max_handshakes:
            return False
        expired = self._loop.time() - HANDSHAKE_TIMEOUT
        for protocol, began in list(self._handshaking.items()):
            if _settled(protocol):
                del self._handshaking[protocol]
            elif began < expired:
                del self._handshaking[protocol]
                protocol.close()  # frees the slot now; the client retries if it still cares
                self.expired += 1
        return len(self._handshaking) >= self.max_handshakes

    def _connection_terminated(self, protocol: Any) -> None:
        self._handshaking.pop(protocol, None)
        for cid in aioquic_internals.connection_ids(aioquic_internals.protocol_connection(protocol)):
            if self._protocols.get(cid) is protocol:
                del self._protocols[cid]


def _settled(protocol: Any) -> bool:
    """The protocol's Aqueduct handshake finished, or its connection ended."""
    ready = getattr(protocol, "ready", None)
    return ready is None or ready.done() or getattr(protocol, "terminated", None) is not None
