"""Every use of aioquic's private internals, in one room, checked against the installed version.

aioquic offers no public way to read some things the runtime needs: the
peer's datagram frame size (to refuse a peer without RFC 9221 datagrams
and to size ours), the smoothed RTT (the core's receipt deadlines), the
negotiated idle timeout (keepalives), the datagrams still waiting in its
send queue (so stream data never overtakes the datagrams it announces),
the connection ids a server must forget, a hook after it builds its
TLS context (mutual TLS), and the stateless reset tokens it draws at random
and never checks (:mod:`~aqueduct.runtime.backends.stateless_reset`), and its
acknowledgement policy (:func:`delay_acks`). Each is read here, through a small function,
and listed in :data:`INTERNALS`; ``tests/unit/test_aioquic_internals.py``
checks every entry against the installed aioquic, so an upgrade that
renames one fails that test, naming it, instead of failing inside a live
connection. ``pyproject.toml`` keeps aioquic below its next minor version
for the same reason.

The subclasses that extend aioquic's server and TLS context
(:mod:`aqueduct.runtime.backends.quic_server`, :mod:`aqueduct.runtime.backends.tls`) use
more of their parents' private members; those are listed here too.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from aioquic import tls
from aioquic.quic import events
from aioquic.quic.connection import QuicConnection
from aioquic.quic.packet import QuicErrorCode

from aqueduct.runtime.backends.stateless_reset import token_of
from aqueduct.runtime.backends.tls_failures import CLIENT_REFUSED

STATELESS_RESET_CODE = QuicErrorCode.NO_ERROR
"""The error code a connection ended by a stateless reset reports (a reset carries none)."""

#: (aioquic class, private member, what the runtime needs it for)
INTERNALS: tuple[tuple[str, str, str], ...] = (
    ("QuicConnection", "_remote_max_datagram_frame_size", "refuse a peer without datagrams; size ours"),
    ("QuicConnection", "_max_datagram_size", "the largest datagram payload that fits a packet"),
    ("QuicConnection", "_loss", "RTT and congestion figures (stats, the core's deadlines)"),
    ("QuicPacketRecovery", "_rtt_initialized", "whether an RTT sample exists yet"),
    ("QuicPacketRecovery", "_rtt_smoothed", "the smoothed RTT"),
    ("QuicConnection", "_idle_timeout", "keepalive PINGs at a third of the negotiated idle timeout"),
    ("QuicConnection", "_datagrams_pending", "hold stream data until the datagrams it announces left"),
    ("QuicConnection", "_packet_number", "packets sent (stats)"),
    ("QuicConnection", "_host_cids", "a server forgets a closed connection's ids"),
    ("QuicConnection", "_original_destination_connection_id", "a server forgets a closed connection's ids"),
    ("QuicConnection", "_initialize", "mutual TLS: hook the TLS context once aioquic built it"),
    ("QuicConnection", "_replenish_connection_ids", "stateless resets: tokens a restarted server knows too"),
    ("QuicConnection", "_peer_cid", "stateless resets: the token the server gave with its first id"),
    ("QuicConnection", "_peer_cid_available", "stateless resets: the tokens of the server's other ids"),
    ("QuicConnection", "_close_event", "stateless resets: end the connection saying why"),
    ("QuicConnection", "_close_end", "stateless resets: end the connection at once (no closing period)"),
    ("QuicConnection", "_ack_delay", "ack policy: how long a lone packet's ACK may wait (1 ms in aioquic)"),
    ("QuicConnection", "_spaces", "ack policy: the application space's pending ACK"),
    ("QuicConnection", "_payload_received", "ack policy: count the ack-eliciting packets not acked yet"),
    ("QuicPacketSpace", "ack_at", "ack policy: when the pending ACK goes out"),
    ("QuicConnectionProtocol", "_quic", "the protocol's connection"),
    ("QuicServer", "_protocols", "the server's connection table (handshake bound, refusals)"),
    ("QuicServer", "_configuration", "versions and connection id length for refusals"),
    ("QuicServer", "_transport", "send a refusal"),
    ("QuicServer", "_loop", "the clock of handshake slots and retry hints"),
    ("Context", "_request_client_certificate", "mutual TLS: ask for a client certificate"),
    ("Context", "_server_handle_certificate", "mutual TLS: require the certificate"),
    ("Context", "_server_handle_certificate_verify", "mutual TLS: verify it against the CA"),
    ("Context", "_peer_certificate", "mutual TLS: the client's certificate; a client: whose certificate failed"),
    ("Context", "_peer_certificate_chain", "the peer certificate's chain (the same two checks)"),
)


def remote_max_datagram_frame_size(quic: QuicConnection) -> int | None:
    """The peer's ``max_datagram_frame_size`` transport parameter (None: no datagrams)."""
    return quic._remote_max_datagram_frame_size


def max_datagram_size(quic: QuicConnection) -> int:
    """The largest UDP payload this connection sends."""
    return quic._max_datagram_size


def smoothed_rtt(quic: QuicConnection) -> float | None:
    """The smoothed RTT in seconds, or None before the first sample."""
    loss = quic._loss
    return loss._rtt_smoothed if loss._rtt_initialized else None


def congestion(quic: QuicConnection) -> tuple[int, int]:
    """``(bytes in flight, congestion window)``."""
    loss = quic._loss
    return loss.bytes_in_flight, loss.congestion_window


def packets_sent(quic: QuicConnection) -> int:
    """Packets sent so far (packet numbers are never reused)."""
    return quic._packet_number


def idle_timeout(quic: QuicConnection) -> float:
    """The negotiated idle timeout in seconds."""
    return quic._idle_timeout()


def pending_datagrams(quic: QuicConnection) -> int:
    """Datagrams handed to aioquic that have not left in a packet yet."""
    return len(quic._datagrams_pending)


def connection_ids(quic: QuicConnection) -> set[bytes]:
    """Every id a server may know this connection by."""
    ids = {c.cid for c in quic._host_cids}
    ids.add(quic._original_destination_connection_id)
    return ids


def stable_reset_tokens(quic: QuicConnection, token: Callable[[bytes], bytes], issued: Callable[[bytes], None]) -> None:
    """Give every connection id a server's connection issues the reset token ``token(id)``, not a random one.

    Called before the connection's first packet: the first id's token goes
    out in the transport parameters, later ids' in NEW_CONNECTION_ID frames
    (aioquic draws both with ``os.urandom``). ``issued(id)`` is called for
    each later id as it is drawn, before it is sent: aioquic tells its
    server only after the frame went out, and a packet the client sends to
    the new id in between would be reset as one of no connection.
    """
    replenish = quic._replenish_connection_ids

    def replenish_then_stamp() -> None:
        known = len(quic._host_cids)
        replenish()
        for new in quic._host_cids[known:]:
            new.stateless_reset_token = token(new.cid)
            issued(new.cid)

    for first in quic._host_cids:
        first.stateless_reset_token = token(first.cid)
    quic._replenish_connection_ids = replenish_then_stamp  # type: ignore[method-assign]


def is_stateless_reset(quic: QuicConnection, datagram: bytes) -> bool:
    """Is ``datagram`` a stateless reset of this (client's) connection: a token the server gave, not a packet of ours?"""
    tail = token_of(datagram)
    if tail is None:
        return False
    length = quic.configuration.connection_id_length
    destination = datagram[1 : 1 + length]
    if any(own.cid == destination for own in quic._host_cids):
        return False  # one of our packets (a reset's bytes there are random)
    tokens = [quic._peer_cid.stateless_reset_token, *(c.stateless_reset_token for c in quic._peer_cid_available)]
    return any(known and hmac.compare_digest(known, tail) for known in tokens)


def end_by_stateless_reset(quic: QuicConnection, reason: str) -> None:
    """The server reset the connection: it ends now, with ``reason`` and no packet sent (section 10.3.1)."""
    quic._close_event = events.ConnectionTerminated(
        error_code=STATELESS_RESET_CODE, frame_type=None, reason_phrase=reason
    )
    quic._close_end()


def session_resumed(quic: QuicConnection) -> bool:
    """Did the TLS handshake resume a session (a ticket) rather than run in full?"""
    context = getattr(quic, "tls", None)  # set on the first Initial
    return context is not None and context.session_resumed


def peer_certificate(quic: QuicConnection) -> tuple[Any, list[Any]] | None:
    """The certificate (and chain) the peer presented, None before it did.

    A client whose handshake failed on a TLS alert checks it again, to tell
    its own refusal of the server's certificate from the server's refusal
    of its own (:mod:`~aqueduct.runtime.backends.tls_failures`).
    """
    context = getattr(quic, "tls", None)
    if context is None or context._peer_certificate is None:
        return None
    return context._peer_certificate, list(context._peer_certificate_chain)


def after_tls_initialized(quic: QuicConnection, hook: Callable[[], None]) -> None:
    """Call ``hook`` right after aioquic builds ``quic.tls`` (on the first Initial packet)."""
    initialize = quic._initialize

    def initialize_then_hook(peer_cid: bytes) -> None:
        initialize(peer_cid)
        hook()

    quic._initialize = initialize_then_hook  # type: ignore[method-assign]


CERTIFICATE_REQUIRED = f"{CLIENT_REFUSED}: it presented no certificate (mutual TLS requires one)"
"""The reason phrase of a server's ``certificate_required`` alert (see
:mod:`~aqueduct.runtime.backends.tls_failures`: how a server's own refusals begin)."""


class AlertCertificateRequired(tls.Alert):
    """TLS alert 116: the server requires a client certificate and got none."""

    description = tls.AlertDescription.certificate_required


def verify_client_certificates(context: tls.Context, verify: Callable[[Any, list[Any]], None]) -> None:
    """Make a server's TLS context demand a client certificate and check it with ``verify(certificate, chain)``."""
    context._request_client_certificate = True
    handle_certificate = context._server_handle_certificate
    handle_verify = context._server_handle_certificate_verify

    def server_handle_certificate(input_buf: Any) -> None:
        handle_certificate(input_buf)
        if context._peer_certificate is None:
            raise AlertCertificateRequired(CERTIFICATE_REQUIRED)

    def server_handle_certificate_verify(input_buf: Any) -> None:
        handle_verify(input_buf)  # proves the client holds the certificate's key
        assert context._peer_certificate is not None
        verify(context._peer_certificate, context._peer_certificate_chain)

    context._server_handle_certificate = server_handle_certificate  # type: ignore[method-assign]
    context._server_handle_certificate_verify = server_handle_certificate_verify  # type: ignore[method-assign]


ACK_DELAY = 0.025
"""How long an established connection lets a lone ack-eliciting packet's ACK
wait for a packet of data to ride on: the ``max_ack_delay`` aioquic
advertises (25 ms, so the peer's loss timers already allow for it)."""


def delay_acks(quic: QuicConnection) -> None:
    """Acknowledge as RFC 9000 section 13.2.2 recommends, from now on (called once the handshake completed).

    aioquic acks every ack-eliciting packet 1 ms after it arrived. A
    producer's record is a lone packet that the bridge answers a few
    milliseconds later (the group commit), and each side's reports follow
    tens of milliseconds after that, so nearly every ACK went out in an
    ACK-only packet of its own: half of all frames of a connected fleet
    (docs/performance.md, "What a connected fleet costs"). Here a lone
    packet's ACK waits up to :data:`ACK_DELAY` and goes with the next
    packet of data (:func:`ack_with_data`), while a second ack-eliciting
    packet not acked yet is acked at once, so a bulk transfer is still
    acked every other packet and its congestion window grows as before.
    Handshake packets keep aioquic's 1 ms: this is called after them.
    """
    quic._ack_delay = ACK_DELAY
    space = quic._spaces[tls.Epoch.ONE_RTT]
    received = quic._payload_received
    unacked = 0  # ack-eliciting 1-RTT packets since the last ACK went out

    def payload_received(context: Any, plain: bytes, crypto_frame_required: bool = False) -> tuple[bool, bool]:
        nonlocal unacked
        if space.ack_at is None:  # an ACK went out since (or none was owed)
            unacked = 0
        eliciting, probing = received(context, plain, crypto_frame_required=crypto_frame_required)
        if eliciting and context.epoch == tls.Epoch.ONE_RTT:
            unacked += 1
            if unacked >= 2:
                space.ack_at = context.time  # due now; aioquic keeps a pending ack_at as it is
        return eliciting, probing

    quic._payload_received = payload_received  # type: ignore[method-assign]


def ack_with_data(quic: QuicConnection) -> None:
    """Make a pending ACK due now, to go in the packet of data about to be built rather than alone later."""
    space = quic._spaces.get(tls.Epoch.ONE_RTT)
    if space is not None and space.ack_at is not None:
        space.ack_at = 0.0  # in the past: due


def protocol_connection(protocol: Any) -> QuicConnection:
    """The :class:`QuicConnection` an aioquic protocol drives."""
    return protocol._quic
