"""The aioquic backend: Aqueduct drivers on aioquic connections, servers and sockets.

:class:`AioquicTransport` is aioquic's protocol object for one connection:
it turns aioquic's events into the driver's input calls and implements
:class:`~aqueduct.runtime.transport.QuicTransport` on its
``QuicConnection``. :func:`listen` and :func:`dial` are the backend's
halves of :func:`~aqueduct.runtime.endpoints.serve` and
:func:`~aqueduct.runtime.endpoints.connect`. This module and the ones it
uses (:mod:`~aqueduct.runtime.backends.aioquic_internals`,
:mod:`~aqueduct.runtime.backends.quic_server`, :mod:`~aqueduct.runtime.backends.session_tickets`,
:mod:`~aqueduct.runtime.backends.tls`, :mod:`~aqueduct.runtime.backends.udp`) are the only ones
that know aioquic.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import ssl
from collections.abc import Mapping
from functools import partial
from typing import Any

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic import events as quic_events
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection

from aqueduct.auth.identity import certificate_subject
from aqueduct.proto.errors import ConnectionLost
from aqueduct.runtime.backends import aioquic_internals
from aqueduct.runtime.backends.quic_server import DEFAULT_MAX_HANDSHAKES, BoundedQuicServer
from aqueduct.runtime.backends.session_tickets import CLIENT_TICKETS, ServerTickets
from aqueduct.runtime.backends.stateless_reset import STATELESS_RESET, ResetTokens
from aqueduct.runtime.backends.tls import (
    ClientCertificateAuthority,
    client_configuration,
    require_client_certificate,
    server_configuration,
)
from aqueduct.runtime.backends.tls_failures import client_failure, is_tls_alert
from aqueduct.runtime.backends.udp import ReadBatch, open_udp
from aqueduct.runtime.transport import (
    ALPN,
    MAX_DATAGRAM_FRAME_SIZE,
    ClientOptions,
    MakeDriver,
    ServerOptions,
    TransportDriver,
)

PathLike = str | os.PathLike[str]
SERVER_RECEIVE_BUFFER = 16 * 1024 * 1024
"""Bytes a server's UDP socket may queue: the Linux default (208 kB, about 170
full Initials) overflows when a fleet connects at once, and every Initial
dropped there costs its client a retransmission timeout. 8 MB still
overflowed in a 2,000-producer storm (26,871 datagrams dropped while the
loop was busy); 32 MB (16 asked, doubled by the kernel) dropped none
(docs/performance.md, "Garbage collection and the UDP receive queue").
``net.core.rmem_max`` caps it unless the process may exceed it
(:func:`~aqueduct.runtime.backends.udp.ask_receive_buffer`)."""

# Room for QUIC's short header, packet number, AEAD tag and DATAGRAM frame
# header inside one UDP payload; a datagram larger than what fits would stall
# aioquic's datagram queue, so the core is told a safe bound.
DATAGRAM_OVERHEAD = 64
_DatagramFrameReceived = quic_events.DatagramFrameReceived  # (a global, for the hot path)
_StreamDataReceived = quic_events.StreamDataReceived


class AioquicTransport(QuicConnectionProtocol):
    """aioquic's protocol for one connection, feeding a :class:`~aqueduct.runtime.transport.TransportDriver` and driven by it."""

    pings_itself = False  # the driver's keepalive timer sends them (send_ping)

    def __init__(self, quic: QuicConnection, make_driver: MakeDriver, batch: ReadBatch | None = None) -> None:
        super().__init__(quic)
        self.is_client = quic.configuration.is_client
        self._batch = batch  # flush after the socket's whole batch of datagrams, not after each
        self.socket_release: asyncio.Task[None] | None = None  # a client's: closes its socket at the end
        #: where the peer sent from (set by the server on its first Initial) or where a client sent to
        self.address: tuple[str, int] | None = None
        self._data_queued = False  # since the last send: a pending QUIC ACK rides along
        self.driver = make_driver(self)

    @property
    def ready(self) -> asyncio.Future[None]:
        """The Aqueduct handshake (the bounded server frees a handshake slot on it)."""
        return self.driver.ready

    # ------------------------------------------------------------ aioquic -> driver
    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        """A client first checks for a stateless reset, which aioquic would drop as a packet of no connection."""
        assert isinstance(data, bytes)
        if self.is_client and aioquic_internals.is_stateless_reset(self._quic, data):
            aioquic_internals.end_by_stateless_reset(self._quic, STATELESS_RESET)
            self._process_events()
            self.transmit()  # the driver's flush hands the end over
            return
        super().datagram_received(data, addr)

    def quic_event_received(self, event: quic_events.QuicEvent) -> None:
        driver = self.driver
        if isinstance(event, _DatagramFrameReceived):  # the hot path: one per UNRELIABLE message
            driver.datagram_received(event.data)
        elif isinstance(event, _StreamDataReceived):
            driver.stream_data_received(event.stream_id, event.data, event.end_stream)
        elif isinstance(event, quic_events.StreamReset):
            driver.stream_reset_received(event.stream_id, event.error_code)
        elif isinstance(event, quic_events.HandshakeCompleted):
            aioquic_internals.delay_acks(self._quic)
            driver.quic_handshake_completed()
        elif isinstance(event, quic_events.ConnectionTerminated):
            driver.quic_terminated(event.error_code, event.reason_phrase)

    def transmit(self) -> None:
        """aioquic calls this after every datagram it was given and every timer.

        While the socket's reader is still reading a batch, the flush waits
        for the batch's end (see :mod:`aqueduct.runtime.backends.udp`).
        """
        batch = self._batch
        if batch is not None and batch.active:
            batch.defer(self)
            return
        self.driver.flush()

    # ------------------------------------------------------------ QuicTransport
    def send_packets(self) -> None:
        if self._data_queued:  # a pending ACK goes with the data (aioquic_internals.delay_acks)
            self._data_queued = False
            aioquic_internals.ack_with_data(self._quic)
        super().transmit()

    def peer_address(self) -> tuple[str, int] | None:
        return self.address

    def peer_certificate_subject(self) -> str | None:
        # a server sees one only under mutual TLS, where require_client_certificate verified it
        found = aioquic_internals.peer_certificate(self._quic) if not self.is_client else None
        return None if found is None else certificate_subject(found[0])

    def datagram_limit(self) -> int | None:
        remote_max = aioquic_internals.remote_max_datagram_frame_size(self._quic)
        if remote_max is None:
            return None
        return min(remote_max, aioquic_internals.max_datagram_size(self._quic)) - DATAGRAM_OVERHEAD

    def smoothed_rtt(self) -> float | None:
        return aioquic_internals.smoothed_rtt(self._quic)

    def idle_timeout(self) -> float:
        return aioquic_internals.idle_timeout(self._quic)

    def pending_datagrams(self) -> int:
        return aioquic_internals.pending_datagrams(self._quic)

    def send_stream_data(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        self._quic.send_stream_data(stream_id, data, end_stream)
        self._data_queued = True

    def reset_stream(self, stream_id: int, error_code: int) -> None:
        try:
            self._quic.reset_stream(stream_id, error_code)
        except ValueError:
            pass  # aioquic already discarded the stream (all of it was delivered)

    def send_datagram(self, data: bytes) -> None:
        self._quic.send_datagram_frame(data)
        self._data_queued = True

    def send_ping(self, uid: int) -> None:
        self._quic.send_ping(uid)

    def queue_close(self, error_code: int, reason: str) -> None:
        self._quic.close(error_code=error_code, reason_phrase=reason)

    def stats(self) -> dict[str, Any]:
        in_flight, window = aioquic_internals.congestion(self._quic)
        return {
            "smoothed_rtt": aioquic_internals.smoothed_rtt(self._quic),
            "bytes_in_flight": in_flight,
            "congestion_window": window,
            "packets_sent": aioquic_internals.packets_sent(self._quic),
            "session_resumed": aioquic_internals.session_resumed(self._quic),
        }


class AioquicListener:
    """A bound UDP socket with aioquic's (bounded) server on it."""

    def __init__(self, server: BoundedQuicServer) -> None:
        self.server = server

    @property
    def failed_handshakes(self) -> Mapping[str, int]:
        return self.server.failed_handshakes

    @property
    def completed_handshakes(self) -> Mapping[str, int]:
        return self.server.completed_handshakes

    @property
    def address(self) -> tuple[str, int]:
        transport = self.server._transport
        assert transport is not None
        host, port = transport.get_extra_info("sockname")[:2]
        return host, port

    def close(self) -> None:
        self.server.close()


async def listen(host: str, port: int, options: ServerOptions, make_driver: MakeDriver) -> AioquicListener:
    """Bind ``host``:``port`` and run ``make_driver`` for every connection a client opens.

    The certificate, its key and the client CA are read once, here. The
    server issues TLS session tickets (resumption, no 0-RTT) unless it
    requires client certificates (see
    :mod:`~aqueduct.runtime.backends.session_tickets` for both choices).
    ``options.keepalive`` needs nothing here: on aioquic the driver sends
    the PINGs (``QuicTransport.send_ping``). Stateless reset tokens are
    keyed by the private key (:class:`~aqueduct.runtime.backends.stateless_reset.ResetTokens`),
    so a server restarted with the same key resets its predecessor's
    connections.
    """
    o = options
    config = server_configuration(o.certfile, o.keyfile, idle_timeout=o.idle_timeout)
    batch = ReadBatch()
    authority = ClientCertificateAuthority(o.cafile) if o.cafile is not None else None
    tickets = ServerTickets() if authority is None else None
    max_handshakes = DEFAULT_MAX_HANDSHAKES if o.max_handshakes is None else o.max_handshakes

    def create_protocol(quic: QuicConnection, stream_handler: Any = None) -> AioquicTransport:
        # aioquic passes its stream_handler; Aqueduct streams go through the core instead.
        if authority is not None:
            require_client_certificate(quic, authority)
        return AioquicTransport(quic, make_driver, batch)

    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM, flags=socket.AI_PASSIVE)
    family, _, _, _, addr = infos[0]
    # aioquic's serve(), bounded, on a socket whose reader reads whole batches (runtime.udp)
    _, server = await open_udp(
        lambda: BoundedQuicServer(
            configuration=config,
            create_protocol=create_protocol,
            max_handshakes=max_handshakes,
            reset_tokens=ResetTokens.from_key_file(o.keyfile if o.keyfile is not None else o.certfile),
            session_ticket_fetcher=tickets.take if tickets is not None else None,
            session_ticket_handler=tickets.add if tickets is not None else None,
        ),
        addr,
        family,
        batch,
        receive_buffer=SERVER_RECEIVE_BUFFER,
    )
    return AioquicListener(server)


def check_server(host: str, options: ServerOptions) -> None:
    """Nothing to refuse: aioquic serves on a chosen address, with or without mutual TLS."""


async def dial(host: str, port: int, options: ClientOptions, make_driver: MakeDriver) -> TransportDriver:
    """Connect and wait for the Aqueduct handshake; the socket closes when the connection ends.

    The connection presents the newest ticket the process kept from an
    earlier connection to the same server (host, port, SNI), if any, and
    keeps the one it is issued (:data:`~aqueduct.runtime.backends.session_tickets.CLIENT_TICKETS`).
    ``options.keepalive`` needs nothing here: on aioquic the driver sends
    the PINGs (``QuicTransport.send_ping``).
    """
    loop = asyncio.get_running_loop()
    o = options
    server_name = o.server_name or host
    server = (host, port, server_name)
    config = client_configuration(
        server_name, o.cafile, o.verify, o.certfile, o.keyfile, o.idle_timeout, CLIENT_TICKETS.take(server), o.token
    )
    family, addr = await _udp_address(loop, host, port)
    batch = ReadBatch()
    quic = QuicConnection(configuration=config, session_ticket_handler=partial(CLIENT_TICKETS.put, server))
    protocol = AioquicTransport(quic, make_driver, batch)
    driver = protocol.driver
    local = ("::", 0) if family == socket.AF_INET6 else ("0.0.0.0", 0)
    transport, _ = await open_udp(lambda: protocol, local, family, batch)
    protocol.address = (addr[0], addr[1])
    protocol.connect(addr)

    def abort() -> None:
        protocol.close()  # aioquic's own: queues the close and sends it
        transport.close()

    try:
        await driver.wait_ready(o.timeout, f"{host}:{port}", abort)
    except ConnectionLost as lost:
        if not is_tls_alert(lost.code):
            raise
        raise client_failure(
            lost, aioquic_internals.peer_certificate(quic), server_name=server_name, cafile=o.cafile,
            verify=o.verify, certfile=o.certfile,
        ) from None  # fmt: skip
    protocol.socket_release = loop.create_task(_release(protocol, transport))
    return driver


PROBE_CLOSE = "fetched the certificate only, to say why the client refused it"
"""The reason phrase :func:`server_certificate` closes with: the server's log of that connection says so."""


class _CertificateProbe(QuicConnectionProtocol):
    """A client connection that only waits for the server's certificate, then closes."""

    def __init__(self, quic: QuicConnection) -> None:
        super().__init__(quic)
        self.certificate: asyncio.Future[tuple[Any, list[Any]]] = asyncio.get_running_loop().create_future()

    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        super().datagram_received(data, addr)
        if not self.certificate.done() and (got := aioquic_internals.peer_certificate(self._quic)) is not None:
            self.certificate.set_result(got)


async def server_certificate(
    host: str, port: int, server_name: str, timeout: float
) -> tuple[Any, list[Any]] | None:
    """The certificate (and chain) the server at ``host``:``port`` presents for ``server_name``; None if none came in time.

    Its own TLS handshake, which checks nothing and stops once the
    certificate came: a stack that does not say why it refused a server
    (picoquic) learns it by checking what this fetched
    (:mod:`~aqueduct.runtime.backends.tls_failures`).
    """
    loop = asyncio.get_running_loop()
    config = QuicConfiguration(
        is_client=True, alpn_protocols=[ALPN], server_name=server_name, verify_mode=ssl.CERT_NONE,
        max_datagram_frame_size=MAX_DATAGRAM_FRAME_SIZE,
    )  # fmt: skip
    family, addr = await _udp_address(loop, host, port)
    local = ("::", 0) if family == socket.AF_INET6 else ("0.0.0.0", 0)
    probe = _CertificateProbe(QuicConnection(configuration=config))
    transport, _ = await loop.create_datagram_endpoint(lambda: probe, local_addr=local, family=family)
    try:
        probe.connect(addr)
        return await asyncio.wait_for(asyncio.shield(probe.certificate), timeout)
    except TimeoutError:
        return None
    finally:
        aioquic_internals.protocol_connection(probe).close(reason_phrase=PROBE_CLOSE)  # the server logs why
        probe.transmit()
        transport.close()


async def _udp_address(loop: asyncio.AbstractEventLoop, host: str, port: int) -> tuple[int, Any]:
    """(family, address) to send to; an IP literal skips the resolver.

    ``getaddrinfo`` runs on the loop's thread pool: thousands of clients in
    one process (a fleet's load generator, a connection storm) would queue
    on it for an answer they already have.
    """
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
        family, _, _, _, addr = infos[0]
        return family, addr
    if ip.version == 6:
        return socket.AF_INET6, (host, port, 0, 0)
    return socket.AF_INET, (host, port)


async def _release(protocol: AioquicTransport, transport: asyncio.BaseTransport) -> None:
    """Close the client's UDP socket once its QUIC connection is gone."""
    await protocol.wait_closed()
    transport.close()
