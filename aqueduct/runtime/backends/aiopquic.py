"""The picoquic backend, through ``aiopquic`` (Python >= 3.12, the ``picoquic`` extra).

picoquic runs on a network thread of its own (one per client connection,
one per server for all its connections) and talks to the event loop
through rings; :class:`AiopquicTransport` is aiopquic's
protocol object for one connection, turning its events into the driver's
input calls and implementing :class:`~aqueduct.runtime.transport.QuicTransport`
on its ``QuicConnection``. Where aioquic queues without bound, picoquic's
rings push back (``BufferError`` for stream data, 0 for a datagram): the
writes that did not fit wait here, in order, and go on when picoquic says
it drained. The driver never sees the difference.

What it does not do, refused with a clear ``ValueError`` rather than
dropped: mutual TLS (a client cannot present a certificate, a server
cannot verify one), a server on one chosen address (aiopquic binds every
interface, so only a wildcard host is accepted, see :func:`check_server`)
and a bound on handshakes in progress (picoquic runs them in C on its
thread). So a picoquic server never names a retry window
(:mod:`~aqueduct.runtime.retry_hint`): its only refusal is picoquic's own,
in C, once its connection table (:data:`MAX_CONNECTIONS`) is full, a
CONNECTION_REFUSED with no reason phrase, and aiopquic gives Python no
say before picoquic accepts or refuses an Initial (its only admission
switches are that table's size and a Retry for every Initial). Refused
producers fall back on their own backoff (full jitter, capped at 5 s).
Nor can a picoquic client send a turn an aioquic server named back
(``ClientOptions.token``: aiopquic sets no Initial token), so refused by
one it is a newcomer at each attempt.
A picoquic server's stateless resets do not outlive its process (see
:mod:`~aqueduct.runtime.backends.stateless_reset`). Close reasons are not
sent (picoquic's application close carries only the code) and PINGs are
picoquic's own keep-alive, configured when the connection or server is
made.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import ssl
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from aiopquic.asyncio.protocol import QuicConnectionProtocol
from aiopquic.asyncio.server import QuicServer
from aiopquic.quic import events as pico_events
from aiopquic.quic.configuration import QuicConfiguration
from aiopquic.quic.connection import QuicConnection, QuicEngine

from aqueduct.proto.errors import ConnectionLost
from aqueduct.runtime.backends.stateless_reset import STATELESS_RESET
from aqueduct.runtime.backends.tls_failures import HandshakeFailures, client_failure, is_tls_alert
from aqueduct.runtime.transport import (
    ALPN,
    MAX_DATAGRAM_FRAME_SIZE,
    ClientOptions,
    MakeDriver,
    ServerOptions,
    TransportDriver,
)

WILDCARD_HOSTS = {"": socket.AF_INET6, "::": socket.AF_INET6, "0.0.0.0": socket.AF_INET}
"""The only hosts a picoquic server takes, with the family it then listens on
("::" and "" take IPv4 too): aiopquic binds every interface."""
PROBE_TIMEOUT = 5.0
"""Seconds to wait for the server's certificate when checking why picoquic refused it."""
MAX_CONNECTIONS = 65536
"""Connections one picoquic server holds at once (aiopquic's default, 256, is
far below a fleet); past it picoquic refuses new ones (CONNECTION_REFUSED)."""
PICOQUIC_STATELESS_RESET = 0x41E
"""The code picoquic ends a connection with when its server answered with a stateless reset
(``PICOQUIC_ERROR_STATELESS_RESET``; it checks the token itself)."""

#: (aiopquic class, private member, what the backend needs it for); checked against the
#: installed aiopquic by ``tests/unit/test_aiopquic_internals.py`` (``pyproject.toml``
#: keeps aiopquic below its next minor version for the same reason)
INTERNALS: tuple[tuple[str, str, str], ...] = (
    ("QuicConnection", "_start_transport", "start a client's picoquic thread on an ephemeral port"),
    ("QuicConnection", "_transport", "the ring whose drain event wakes writes that did not fit"),
    ("TransportContext", "tx_event_ring_drain_event", "wake writes that did not fit the event ring"),
    ("QuicEngine", "_start_transport", "start a server's picoquic thread (its reader is ours: DrainBatch)"),
    ("QuicConnectionProtocol", "_quic", "the protocol's connection"),
    ("QuicConnectionProtocol", "_closed", "wait for the end without unregistering a server's shared reader"),
    ("QuicConnectionProtocol", "_start", "register a client's event reader"),
    ("QuicConnectionProtocol", "_stop", "unregister a client's event reader"),
    ("QuicConnectionProtocol", "_process_events", "one flush per wake-up (overridden)"),
)
RTT_REFRESH = 0.05
"""Seconds between reads of picoquic's path figures (each read asks its thread for a snapshot)."""
MAX_WRITE = 256 * 1024
"""The most stream data handed to aiopquic in one write (bytes).

Its per-stream send ring refuses, with a ``ValueError``, a write larger
than its capacity (``stream_ring_cap``, 4 MiB), and the driver writes up
to a channel's whole window at once, which may be larger. Writes of a
fraction of the ring also go on while it is still partly full instead of
waiting for it to drain completely."""

_DatagramFrameReceived = pico_events.DatagramFrameReceived
_StreamDataReceived = pico_events.StreamDataReceived


class AiopquicTransport(QuicConnectionProtocol):
    """aiopquic's protocol for one connection, feeding a :class:`~aqueduct.runtime.transport.TransportDriver` and driven by it."""

    pings_itself = True  # picoquic's keep-alive, configured at dial / listen

    def __init__(self, quic: QuicConnection, make_driver: MakeDriver, drain: DrainBatch | None = None) -> None:
        super().__init__(quic)
        self._drain = drain  # a server's: flush once the whole drain of its shared ring ended
        self.is_client = quic.configuration.is_client
        #: stream -> writes that did not fit picoquic's rings yet, in order
        self._blocked: dict[int, deque[tuple[bytes, bool]]] = {}
        self._blocked_datagrams: deque[bytes] = deque()
        self._max_write = min(MAX_WRITE, quic.configuration.stream_ring_cap)
        self._retry: asyncio.Task[None] | None = None
        self._path: dict[str, Any] = {}
        self._path_at = float("-inf")
        self.socket_release: asyncio.Task[None] | None = None  # a client's: stops picoquic's thread at the end
        self._address: tuple[str, int] | None = None
        self.handshake_completed = False  # picoquic's own (QUIC's), which a certificate it refused never reaches
        self.driver = make_driver(self)

    @property
    def ready(self) -> asyncio.Future[None]:
        return self.driver.ready

    # ------------------------------------------------------------ picoquic -> driver
    def _process_events(self) -> None:
        """A wake-up from picoquic's thread: every event it queued, then one flush.

        A server's connections share one ring, drained an event at a time:
        their flushes wait for the end of that drain (:class:`DrainBatch`).
        """
        super()._process_events()
        drain = self._drain
        if drain is not None and drain.active:
            drain.pending[self] = None
        else:
            self.driver.flush()

    def quic_event_received(self, event: pico_events.QuicEvent) -> None:
        driver = self.driver
        if isinstance(event, _DatagramFrameReceived):
            driver.datagram_received(bytes(event.data))
        elif isinstance(event, _StreamDataReceived):
            driver.stream_data_received(event.stream_id, bytes(event.data), event.end_stream)
        elif isinstance(event, pico_events.StreamReset):
            driver.stream_reset_received(event.stream_id, event.error_code)
        elif isinstance(event, pico_events.HandshakeCompleted):
            self.handshake_completed = True
            driver.quic_handshake_completed()
        elif isinstance(event, pico_events.ConnectionTerminated):
            self._blocked.clear()
            self._blocked_datagrams.clear()
            reset = event.error_code == PICOQUIC_STATELESS_RESET and not event.reason_phrase
            driver.quic_terminated(event.error_code, STATELESS_RESET if reset else event.reason_phrase)

    # ------------------------------------------------------------ QuicTransport
    def transmit(self) -> None:
        # picoquic's thread sends; every queued write already woke it.
        self.driver.flush()

    def send_packets(self) -> None:
        """Nothing to do: picoquic's own thread builds and sends the packets."""

    def peer_address(self) -> tuple[str, int] | None:
        """picoquic's view of the peer's address, kept once known (a closed connection has none)."""
        if self._address is None and not self._quic.closed:
            self._address = self._quic.peer_address()
        return self._address

    def peer_certificate_subject(self) -> str | None:
        """None: picoquic's server verifies no client certificates (``--client-ca`` is refused with it)."""
        return None

    def datagram_limit(self) -> int | None:
        return self._quic.max_datagram_payload() or None

    def _path_quality(self) -> dict[str, Any]:
        now = asyncio.get_running_loop().time()
        if now - self._path_at >= RTT_REFRESH:
            self._path, self._path_at = self._quic.path_quality(), now
        return self._path

    def smoothed_rtt(self) -> float | None:
        return _rtt_seconds(self._path_quality())

    def idle_timeout(self) -> float:
        return self._quic.configuration.idle_timeout

    def pending_datagrams(self) -> int:
        ring = self._quic.datagram_ring_stats()
        queued = 0 if ring is None else ring["records_pushed"] - ring["records_popped"]
        return queued + len(self._blocked_datagrams)

    def send_stream_data(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        step = self._max_write
        if len(data) > step:  # in pieces the ring can take (bounded: len(data) / step writes)
            starts = range(0, len(data), step)
            for start in starts[:-1]:
                self._write(stream_id, data[start : start + step], False)
            data = data[starts[-1] :]
        self._write(stream_id, data, end_stream)

    def _write(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        waiting = self._blocked.get(stream_id)
        if waiting is not None:
            waiting.append((data, end_stream))
            return
        try:
            self._quic.send_stream_data(stream_id, data, end_stream)
        except BufferError:  # all or nothing: nothing of it was taken
            self._blocked[stream_id] = deque([(data, end_stream)])
            self._retry_later()

    def reset_stream(self, stream_id: int, error_code: int) -> None:
        self._blocked.pop(stream_id, None)  # unsent data of a reset stream is dropped
        self._quic.reset_stream(stream_id, error_code)

    def send_datagram(self, data: bytes) -> None:
        if self._blocked_datagrams:
            self._blocked_datagrams.append(data)
            return
        with contextlib.suppress(ConnectionError):  # closing: the driver learns it from the events
            if self._quic.send_datagram_frame(data) == 0:
                self._blocked_datagrams.append(data)
                self._retry_later()

    def send_ping(self, uid: int) -> None:
        """Never called (``pings_itself``): picoquic sends its own keep-alive PINGs."""

    def queue_close(self, error_code: int, reason: str) -> None:
        """picoquic's application close carries the code, not the reason."""
        self._quic.close(error_code=error_code, reason_phrase=reason)

    async def wait_closed(self) -> None:
        """Wait until the connection is gone; a client's then stops its picoquic thread.

        (aiopquic's own ``wait_closed`` also unregisters the connection's
        event reader, which on a server is the one every connection shares.)
        """
        await self._closed.wait()
        if self.is_client:
            self._stop()
            self._quic.stop()

    def stats(self) -> dict[str, Any]:
        path = self._quic.path_quality()  # fresh: stats are asked for rarely
        return {
            "smoothed_rtt": _rtt_seconds(path),
            "bytes_in_flight": path.get("bytes_in_transit", 0),
            "congestion_window": path.get("cwin", 0),
            "packets_sent": path.get("sent", 0),
        }

    # ------------------------------------------------------------ backpressure
    def _retry_later(self) -> None:
        if self._retry is None:
            self._retry = asyncio.get_running_loop().create_task(self._retry_blocked())

    async def _retry_blocked(self) -> None:
        """Hand the waiting writes over as picoquic drains its rings, oldest first per stream."""
        quic = self._quic
        try:
            while (self._blocked or self._blocked_datagrams) and not quic.closed:
                events = [quic.get_tx_data_drain_event(sid) for sid in self._blocked]
                events.append(quic._transport.tx_event_ring_drain_event)
                if self._blocked_datagrams:
                    events.append(quic.get_datagram_tx_drain_event())
                waits = [asyncio.ensure_future(event.wait()) for event in events]
                # A drain event, or a short pause: the ring event is only armed
                # by some of the paths that fill the ring.
                _, pending = await asyncio.wait(waits, timeout=0.002, return_when=asyncio.FIRST_COMPLETED)
                for wait in pending:
                    wait.cancel()
                for event in events:
                    event.clear()
                self._hand_over_blocked()
        finally:
            self._retry = None

    def _hand_over_blocked(self) -> None:
        quic = self._quic
        for stream_id in list(self._blocked):
            waiting = self._blocked[stream_id]
            while waiting:
                data, end_stream = waiting[0]
                try:
                    quic.send_stream_data(stream_id, data, end_stream)
                except BufferError:
                    break
                waiting.popleft()
            if not waiting:
                del self._blocked[stream_id]
        datagrams = self._blocked_datagrams
        while datagrams:
            try:
                if quic.send_datagram_frame(datagrams[0]) == 0:
                    break
            except ConnectionError:
                datagrams.clear()
                break
            datagrams.popleft()


def _rtt_seconds(path: dict[str, Any]) -> float | None:
    """The smoothed RTT of a path snapshot in seconds (picoquic counts microseconds), None before a sample."""
    rtt = path.get("rtt")
    return rtt / 1e6 if rtt else None


async def dial(host: str, port: int, options: ClientOptions, make_driver: MakeDriver) -> TransportDriver:
    """Connect and wait for the Aqueduct handshake; picoquic's thread stops when the connection ends."""
    o = options
    if o.certfile is not None or o.keyfile is not None:
        raise ValueError(
            "the picoquic backend cannot present a client certificate (mutual TLS); "
            "connect with backend='aioquic'"
        )
    config = QuicConfiguration(
        is_client=True,
        alpn_protocols=[ALPN],
        max_datagram_frame_size=MAX_DATAGRAM_FRAME_SIZE,
        server_name=o.server_name or host,
        idle_timeout=o.idle_timeout,
        verify_mode=ssl.CERT_REQUIRED if o.verify else ssl.CERT_NONE,
        cafile=os.fspath(o.cafile) if o.cafile is not None else None,
        # PINGs at a third of the idle timeout, as the aioquic driver sends them.
        keep_alive_interval=o.idle_timeout / 3 if o.keepalive else None,
        congestion_control_algorithm="cubic",
    )
    loop = asyncio.get_running_loop()
    address = await _ip_address(loop, host, port)
    quic = QuicConnection(configuration=config)
    quic._start_transport(port=0)
    protocol = AiopquicTransport(quic, make_driver)
    driver = protocol.driver
    protocol._start(loop)
    started = loop.time()
    protocol.connect((address, port))

    def abort() -> None:
        protocol.close()
        protocol._stop()
        quic.stop()

    try:
        await driver.wait_ready(o.timeout, f"{host}:{port}", abort)
    except ConnectionLost as lost:
        answered = loop.time() - started < o.idle_timeout / 2  # not picoquic giving up on a silent server
        raise await _why_refused(lost, protocol, answered, address, port, config.server_name or host, o) from None
    protocol.socket_release = loop.create_task(protocol.wait_closed())  # stops picoquic's thread
    return driver


async def _why_refused(
    lost: ConnectionLost,
    protocol: AiopquicTransport,
    quick: bool,
    address: str,
    port: int,
    server_name: str,
    o: ClientOptions,
) -> ConnectionLost:
    """What a failed handshake raises: whose certificate failed and why, where it was one.

    aiopquic reports only the peer's close code: picoquic's own refusal of
    the server's certificate ends the connection with code 0, no reason,
    before QUIC's handshake completed. Only a ``quick`` end (well within
    the idle timeout: picoquic gives up on a server that never answers
    with the same bare close, after it) can be one; the server's
    certificate, fetched and checked again
    (:func:`~aqueduct.runtime.backends.aioquic.server_certificate`), tells
    it apart, so the client fails at once saying why instead of retrying.
    """
    fetched = None
    if lost.code == 0 and quick and not protocol.handshake_completed and o.verify:
        from aqueduct.runtime.backends.aioquic import server_certificate

        fetched = await server_certificate(address, port, server_name, min(o.timeout, PROBE_TIMEOUT))
    elif not is_tls_alert(lost.code):
        return lost
    return client_failure(
        lost, fetched, server_name=server_name, cafile=o.cafile, verify=o.verify, certfile=o.certfile
    )


async def _ip_address(loop: asyncio.AbstractEventLoop, host: str, port: int) -> str:
    """The IP address to send to (picoquic takes addresses, not names)."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
        return infos[0][4][0]


def check_server(host: str, options: ServerOptions) -> None:
    """Raise ``ValueError`` (why) for a server this backend cannot run as asked.

    aiopquic's server takes a port, not an address: it listens on every
    interface. Serving "127.0.0.1" there would silently expose the port
    on every network the machine is on, so only a wildcard host is taken,
    which says so. (To keep a picoquic server on loopback only, run it in
    a network namespace whose only interface is loopback, as the tests do.)
    """
    if host not in WILDCARD_HOSTS:
        raise ValueError(
            f"the picoquic backend cannot serve on {host!r} alone: aiopquic's server listens on "
            f"every interface; serve on '::' or '0.0.0.0' to accept that, or use backend 'aioquic'"
        )
    if options.cafile is not None:
        raise ValueError(
            "the picoquic backend cannot verify client certificates (mutual TLS); "
            "serve with backend 'aioquic' to require them"
        )
    if options.max_handshakes is not None:
        raise ValueError(
            "max_handshakes does not apply to the picoquic backend (picoquic runs handshakes in C on "
            "its own thread, bounded by its connection table); leave it unset or use 'aioquic'"
        )


class DrainBatch:
    """The connections of a server touched during one drain of picoquic's ring, flushed at its end.

    aiopquic routes a server's events one at a time, each to its
    connection's protocol; flushing the driver after each would build
    packets per event (a datagram, a stream chunk) where one flush per
    connection per wake-up does.
    """

    def __init__(self) -> None:
        self.active = False
        self.pending: dict[AiopquicTransport, None] = {}  # ordered, unique

    def run(self, drain: Callable[[], None]) -> None:
        self.active = True
        try:
            drain()
        finally:
            self.active = False
            pending, self.pending = self.pending, {}
            for transport in pending:
                transport.driver.flush()


class AiopquicListener:
    """A picoquic server: one network thread and socket for all its connections."""

    def __init__(self, server: QuicServer, address: tuple[str, int], failures: HandshakeFailures) -> None:
        self.server = server
        self.address = address
        self._failures = failures

    @property
    def failed_handshakes(self) -> Mapping[str, int]:
        """Handshakes that failed, by kind (see :class:`~aqueduct.runtime.backends.tls_failures.HandshakeFailures`)."""
        return self._failures.counts

    @property
    def completed_handshakes(self) -> Mapping[str, int]:
        """Not counted: picoquic completes its handshakes on its own thread."""
        return {}

    def close(self) -> None:
        """Stop picoquic's thread (every connection left ends with it) and release the port."""
        self.server.close()


async def listen(host: str, port: int, options: ServerOptions, make_driver: MakeDriver) -> AiopquicListener:
    """Listen on every interface at ``port`` (0: a free one) and run ``make_driver`` per connection."""
    check_server(host, options)
    o = options
    family = WILDCARD_HOSTS[host]
    if port == 0:
        port = free_udp_port(family)  # aiopquic cannot say which port it took
    config = QuicConfiguration(
        is_client=False,
        alpn_protocols=[ALPN],
        max_datagram_frame_size=MAX_DATAGRAM_FRAME_SIZE,
        idle_timeout=o.idle_timeout,
        keep_alive_interval=o.idle_timeout / 3 if o.keepalive else None,
        congestion_control_algorithm="cubic",
        max_connections=MAX_CONNECTIONS,
        ip_family=None if family == socket.AF_INET6 else socket.AF_INET,  # None: IPv6 and IPv4
    )
    config.load_cert_chain(os.fspath(o.certfile), os.fspath(o.keyfile) if o.keyfile is not None else None)

    batch = DrainBatch()
    failures = HandshakeFailures()

    def create_protocol(quic: QuicConnection, stream_handler: Any = None) -> AiopquicTransport:
        transport = AiopquicTransport(quic, make_driver, batch)
        address = transport.peer_address()  # now: a connection that ended has none

        def settled(ready: asyncio.Future[None]) -> None:
            if not ready.cancelled() and (error := ready.exception()) is not None:
                failures.failed(address, error)

        transport.ready.add_done_callback(settled)
        return transport

    # aiopquic's serve(), with its ring drained in one batch per wake-up
    engine = QuicEngine(configuration=config, create_protocol=create_protocol)
    engine._start_transport(port=port)
    loop = asyncio.get_running_loop()
    loop.add_reader(engine.eventfd, batch.run, engine.drain_and_route)
    return AiopquicListener(QuicServer(engine, loop), (host or "::", port), failures)


def free_udp_port(family: int) -> int:
    """A UDP port free on every interface right now (picoquic binds it next)."""
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", 0))
        return probe.getsockname()[1]
