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
client sees a refused connection and retries, instead of waiting for an
idle timeout. The refusal's reason phrase names a window to retry in and a
turn, in a queue called at the server's measured handshake rate
(:class:`aqueduct.runtime.retry_hint.HandshakeAdmission`, whose table decides every
Initial), so a crowd many times that rate comes back spread over the time
the server needs for it; a client that names its turn in its next Initial's
QUIC token keeps its place, and is admitted once its turn has come even
with every slot taken (up to twice the bound). Handshakes that finished (or failed) free
their slot, and one whose client sent nothing for ``HANDSHAKE_TIMEOUT`` is
closed (its client gave up). A slow client that is still there keeps its
slot: closing handshakes that merely took long (15 s from the first
Initial, as before) killed, on a loaded machine, handshakes nearly done
whose clients then waited out their own 30 s timeout. The table is kept
in order of each handshake's last packet, so only the first can have
expired and a refusal costs O(1) however many handshakes are in progress.

A server given :class:`~aqueduct.runtime.backends.stateless_reset.ResetTokens`
issues every connection id with its token, and answers a short-header
packet of a connection it does not know with a stateless reset: the clients
of a process that died learn from its successor, at their next packet, that
their connection is gone, instead of at their idle timeout.

It also makes forgetting an ended connection cost O(its connection ids)
instead of a scan of every connection's ids (aioquic's
``_connection_terminated``), which made N connections ending together
quadratic.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any

from aioquic.asyncio.server import QuicServer
from aioquic.buffer import Buffer
from aioquic.quic.configuration import SMALLEST_MAX_DATAGRAM_SIZE
from aioquic.quic.connection import TRANSPORT_CLOSE_FRAME_CAPACITY, NetworkAddress
from aioquic.quic.crypto import CryptoPair
from aioquic.quic.packet import QuicErrorCode, QuicFrameType, QuicPacketType, pull_quic_header
from aioquic.quic.packet_builder import QuicPacketBuilder

from aqueduct.runtime.backends import aioquic_internals
from aqueduct.runtime.backends.stateless_reset import ResetTokens
from aqueduct.runtime.backends.tls_failures import HandshakeFailures
from aqueduct.runtime.retry_hint import HandshakeAdmission, Refused, busy_reason

DEFAULT_MAX_HANDSHAKES = 64
"""Handshakes a server runs at once; more wait (refused, retried by the client)."""
HANDSHAKE_TIMEOUT = 15.0
"""Seconds a handshake may hold its slot without a packet from its client. A
client that gave up (its own attempt timed out, it retries with a new
connection) leaves its half-done handshake behind until the idle timeout (a
minute on the bridge): without this, a storm fills every slot with abandoned
handshakes. A live client waiting on the server still sends (its probes
back off to about 12 s), so it is never taken for gone."""


def encode_refusal(version: int, client_dcid: bytes, client_scid: bytes, reason: str = "") -> bytes:
    """A server Initial closing the connection with CONNECTION_REFUSED and ``reason``.

    Its keys derive from the Destination Connection ID the client chose,
    so no connection state is needed to send it.
    """
    reason_bytes = reason.encode()
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
    buf = builder.start_frame(
        QuicFrameType.TRANSPORT_CLOSE, capacity=TRANSPORT_CLOSE_FRAME_CAPACITY + len(reason_bytes)
    )
    buf.push_uint_var(QuicErrorCode.CONNECTION_REFUSED)
    buf.push_uint_var(QuicFrameType.PADDING)
    buf.push_uint_var(len(reason_bytes))
    buf.push_bytes(reason_bytes)
    datagrams, _ = builder.flush()
    return datagrams[0]


class BoundedQuicServer(QuicServer):
    """``QuicServer`` with at most ``max_handshakes`` handshakes in progress."""

    def __init__(
        self, *, max_handshakes: int = DEFAULT_MAX_HANDSHAKES, reset_tokens: ResetTokens | None = None, **kwargs: Any
    ) -> None:
        if max_handshakes < 1:
            raise ValueError(f"max_handshakes must be at least 1, got {max_handshakes}")
        super().__init__(**kwargs)
        self.reset_tokens = reset_tokens
        if reset_tokens is not None:
            self._create_protocol = partial(self._with_stable_tokens, self._create_protocol, reset_tokens)
        self.resets_sent = 0  # stateless resets: packets of connections this server does not know
        self.max_handshakes = max_handshakes
        #: protocol -> (when its client last sent a packet, when its handshake
        #: began), least recently heard first; a protocol leaves when its
        #: Aqueduct handshake completes or its connection ends
        self._handshaking: dict[Any, tuple[float, float]] = {}
        self.refused = 0  # Initials answered with CONNECTION_REFUSED
        self.admission = HandshakeAdmission(self._loop.time(), max_handshakes)
        self.turns_kept = 0  # refusals of an Initial that named its turn: the queue did not grow
        self.expired = 0  # handshakes closed after HANDSHAKE_TIMEOUT of silence
        self.handshake_failures = HandshakeFailures()
        #: handshakes that completed, ``resumed`` (a session ticket: no certificate work) or ``full``
        self.completed_handshakes: Counter[str] = Counter()

    @property
    def failed_handshakes(self) -> Counter[str]:
        """Handshakes that failed, ``tls`` (a TLS alert: a certificate refused either way) or ``other``."""
        return self.handshake_failures.counts

    def datagram_received(self, data: bytes | str, addr: NetworkAddress) -> None:
        assert isinstance(data, bytes)
        try:
            header = pull_quic_header(
                Buffer(data=data), host_cid_length=self._configuration.connection_id_length
            )
        except ValueError:
            return
        known = header.destination_cid in self._protocols
        if not known and header.packet_type == QuicPacketType.ONE_RTT:
            self._reset(data, header.destination_cid, addr)
            return
        if not known and header.packet_type == QuicPacketType.INITIAL and not self._admitted(header, addr):
            return
        if known and self._handshaking:
            protocol = self._protocols[header.destination_cid]
            held = self._handshaking.pop(protocol, None)
            if held is not None:  # its client is still there: to the end of the table
                self._handshaking[protocol] = (self._loop.time(), held[1])
        super().datagram_received(data, addr)
        if not known:
            protocol = self._protocols.get(header.destination_cid)
            if protocol is not None and getattr(protocol, "address", "") is None:
                protocol.address = (addr[0], addr[1])
            if protocol is not None and protocol not in self._handshaking:
                ready = getattr(protocol, "ready", None)
                if ready is not None and not ready.done():
                    now = self._loop.time()
                    self._handshaking[protocol] = (now, now)
                    ready.add_done_callback(partial(self._settled, protocol, addr))

    def _with_stable_tokens(self, create_protocol: Any, tokens: ResetTokens, quic: Any, **kwargs: Any) -> Any:
        """``create_protocol``, on a connection whose ids carry ``tokens``' reset tokens (before its first packet)."""
        protocol = create_protocol(quic, **kwargs)

        def issued(cid: bytes) -> None:
            self._protocols[cid] = protocol

        aioquic_internals.stable_reset_tokens(quic, tokens.token, issued)
        return protocol

    def _reset(self, packet: bytes, cid: bytes, addr: NetworkAddress) -> None:
        """A packet of a connection this server does not know (it died with an older process): reset it, if it can."""
        if self.reset_tokens is None:
            return  # aioquic's own behaviour: dropped, the client notices at its idle timeout
        reset = self.reset_tokens.reset_for(packet, cid)
        if reset is not None:
            assert self._transport is not None
            self._transport.sendto(reset, addr)
            self.resets_sent += 1

    def _settled(self, protocol: Any, addr: NetworkAddress, ready: Any) -> None:
        """The protocol's Aqueduct handshake completed or failed: its slot is free.

        A failure is logged with the client's address and counted
        (:class:`~aqueduct.runtime.backends.tls_failures.HandshakeFailures`):
        it is the only trace on the server of a certificate refused either way.
        """
        self._release(protocol)
        if ready.cancelled():
            return
        error = ready.exception()
        if error is None:
            resumed = aioquic_internals.session_resumed(aioquic_internals.protocol_connection(protocol))
            self.completed_handshakes["resumed" if resumed else "full"] += 1
            return
        self.handshake_failures.failed(addr, error)

    def _admitted(self, header: Any, addr: NetworkAddress) -> bool:
        """Whether a new connection's Initial starts a handshake; if not, it is refused here, at once.

        :class:`~aqueduct.runtime.retry_hint.HandshakeAdmission` decides from the
        handshakes holding a slot and the turn the Initial's token names; a
        refusal is built from the Initial's keys alone (no state kept). An
        Initial of a version this server does not speak is left to aioquic
        (which answers with version negotiation).
        """
        if header.version not in self._configuration.supported_versions:
            return True
        now = self._loop.time()
        self._expire(now)
        decision = self.admission.admits(now, len(self._handshaking), header.token)
        if not isinstance(decision, Refused):
            return True
        assert self._transport is not None
        reason = busy_reason(decision.window)
        self._transport.sendto(encode_refusal(header.version, header.destination_cid, header.source_cid, reason), addr)
        self.refused += 1
        self.turns_kept += bool(header.token)
        return False

    def _expire(self, now: float) -> None:
        """Close the handshakes whose client was silent for ``HANDSHAKE_TIMEOUT``, if every slot is taken.

        Only the first can have expired (the table is in order of last
        packet), so this costs O(1), not a scan of every handshake in progress.
        """
        if len(self._handshaking) < self.max_handshakes:
            return
        expired = now - HANDSHAKE_TIMEOUT
        stale = []
        for protocol, (heard, _) in self._handshaking.items():
            if heard >= expired:
                break
            stale.append(protocol)
        for protocol in stale:
            self._release(protocol)
            protocol.close()  # frees the slot now; the client retries if it still cares
            self.expired += 1

    def _release(self, protocol: Any) -> None:
        """``protocol``'s slot is free (its handshake completed, failed, expired or its connection ended).

        Admission is told how long every slot was held, not only the slots of
        handshakes that completed: Little's law holds for the slots, and a
        storm's abandoned handshakes, left out, made a bridge completing 15 a
        second believe it could do thousands.
        """
        in_progress = len(self._handshaking)
        held = self._handshaking.pop(protocol, None)
        if held is not None:
            self.admission.completed(self._loop.time() - held[1], in_progress)

    def _connection_terminated(self, protocol: Any) -> None:
        self._release(protocol)
        for cid in aioquic_internals.connection_ids(aioquic_internals.protocol_connection(protocol)):
            if self._protocols.get(cid) is protocol:
                del self._protocols[cid]
