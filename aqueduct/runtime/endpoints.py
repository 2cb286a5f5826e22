"""``serve()`` and ``connect()``: Aqueduct endpoints over a QUIC backend.

A server yields one :class:`ServerConnection` per accepted client, each with
its entrypoint :class:`~aqueduct.runtime.handles.Receiver`; ``connect()``
returns the client's entrypoint :class:`~aqueduct.runtime.handles.Sender`
(``tx.connection`` is the :class:`Connection`). Both wait for the Aqueduct
handshake (VERSION / CONNECTION_HEADERS exchange), not just QUIC's, so the
peer's headers are known when they return. The QUIC stack is reached only
through its backend (:mod:`aqueduct.runtime.backends.aioquic`,
:mod:`aqueduct.runtime.backends.aiopquic`): these
endpoints build the core and the :class:`~aqueduct.runtime.driver.core_driver.Driver`,
the backend the sockets and the QUIC connections.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from aqueduct.proto.config import ProtoConfig
from aqueduct.proto.connection import ConnectionMachine
from aqueduct.proto.errors import ConnectionLost
from aqueduct.runtime.backends import aioquic
from aqueduct.runtime.backends.tls_failures import (
    CertificateRefused as CertificateRefused,  # aqueduct.CertificateRefused
)
from aqueduct.runtime.driver.core_driver import Driver
from aqueduct.runtime.driver.framelog import open_frame_log
from aqueduct.runtime.handles.headers import Headers, HeadersLike, Middleware, normalize_headers
from aqueduct.runtime.handles.pairs import give_connection
from aqueduct.runtime.handles.payload import CONNECTION_HEADERS
from aqueduct.runtime.handles.receiver import Receiver
from aqueduct.runtime.handles.sender import Sender
from aqueduct.runtime.transport import ClientOptions, QuicTransport, ServerOptions

PathLike = str | os.PathLike[str]
CLOSE_TIMEOUT = 5.0
BACKENDS = ("aioquic", "picoquic")
"""The QUIC stacks an endpoint can run on: aioquic (pure Python, the default)
and picoquic (C, through the optional ``aiopquic``; see :func:`serve` for
what a picoquic server refuses)."""


def check_backend(name: str, *, serve_on: str | None = None) -> None:
    """Raise ``ValueError`` (why) unless the QUIC backend ``name`` can be used here.

    With ``serve_on`` (a host), also unless it can serve there (a picoquic
    server takes only a wildcard host): a command line checks that before
    it starts anything.
    """
    stack = _backend(name)
    if serve_on is not None:
        stack.check_server(serve_on, ServerOptions(certfile=""))


def _backend(name: str) -> Any:
    """The backend module called ``name``, or a clear error saying why it cannot be used."""
    if name == "aioquic":
        return aioquic
    if name == "picoquic":
        try:
            from aqueduct.runtime.backends import aiopquic
        except ImportError as exc:
            raise ValueError(
                f"QUIC backend 'picoquic' needs the aiopquic package (Python >= 3.12): "
                f"pip install 'aqueduct[picoquic]' ({exc})"
            ) from None
        return aiopquic
    raise ValueError(f"unknown QUIC backend {name!r}; choose one of {', '.join(BACKENDS)}")


class Connection:
    """One Aqueduct connection: headers, stats and closing."""

    def __init__(self, driver: Driver) -> None:
        self._driver = driver
        driver.link.connection = self

    @property
    def peer_headers(self) -> Headers:
        """The CONNECTION_HEADERS the peer sent."""
        return self._driver.link.peer_headers

    @property
    def peer_address(self) -> tuple[str, int] | None:
        """The peer's (host, port) as the QUIC stack sees it (for log lines); None if unknown."""
        return self._driver.transport.peer_address()

    @property
    def peer_certificate_subject(self) -> str | None:
        """The subject (RFC 4514) of the client certificate mutual TLS verified, else None."""
        return self._driver.transport.peer_certificate_subject()

    @property
    def is_closed(self) -> bool:
        return self._driver.terminated is not None

    @property
    def close_reason(self) -> ConnectionLost | None:
        """Why the connection ended (None while open)."""
        return self._driver.terminated

    @property
    def core(self) -> ConnectionMachine:
        """The sans-IO protocol core of this connection, for inspection only.

        Tests and debugging read its channel table (``core.channels``,
        ``core.channel_count()``) to check that channels which ended left no
        state behind; driving it directly would bypass the runtime.
        """
        return self._driver.core

    def stats(self) -> dict[str, Any]:
        """Counters from the core plus QUIC's view (RTT, bytes in flight, window, packets)."""
        return {**dataclasses.asdict(self._driver.core.stats()), "quic": self._driver.transport.stats()}

    async def close(self, reason: str = "") -> None:
        """Close the connection (application close, code 2) and wait until it is gone."""
        self._driver.close_aqueduct(reason)
        try:
            await asyncio.wait_for(self._driver.wait_closed(), CLOSE_TIMEOUT)
        except TimeoutError:
            pass  # peer unreachable: the QUIC idle timer finishes the job

    async def wait_closed(self) -> None:
        """Wait until the connection ended, for whatever reason."""
        await self._driver.wait_closed()

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class ServerConnection(Connection):
    """A connection accepted by a :class:`Server`, with the entrypoint Receiver."""

    def __init__(self, driver: Driver) -> None:
        super().__init__(driver)
        entry = driver.link.entrypoint()
        assert isinstance(entry, Receiver)
        self.entrypoint: Receiver = entry
        """Messages the client sends on its entrypoint Sender arrive here."""


def _connection_headers(headers: HeadersLike) -> Headers:
    own = normalize_headers(headers)
    if any(k.lower() == "content-type" for k, _ in own):
        return own
    return CONNECTION_HEADERS + own


def _driver_maker(
    headers: Headers,
    middleware: tuple[Middleware, ...],
    frame_log: PathLike | None,
    options: dict[str, Any],
    on_ready: Callable[[Driver], None] | None = None,
    keepalive: bool = False,
) -> Callable[[QuicTransport], Driver]:
    """What a backend calls per QUIC connection: a driver with its own core.

    ``options`` are ``ProtoConfig`` fields (window, limits ...); they are
    checked here, once, not at the first connection.
    """
    ProtoConfig(headers=headers, **options)

    def make(transport: QuicTransport) -> Driver:
        log = open_frame_log(frame_log, "client" if transport.is_client else "server")
        core = ConnectionMachine(transport.is_client, ProtoConfig(headers=headers, frame_log=log, **options))
        return Driver(
            transport, core=core, middleware=middleware, frame_log=log, on_ready=on_ready, keepalive=keepalive
        )

    return make


class Server:
    """A listening endpoint: ``async for conn in server`` yields :class:`ServerConnection`."""

    def __init__(self) -> None:
        self._accepted: asyncio.Queue[ServerConnection | None] = asyncio.Queue()
        self._connections: set[ServerConnection] = set()
        self._listener: Any = None  # the backend's listener: .address, .close()
        self._closed = False

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) actually bound (useful with port 0)."""
        assert self._listener is not None
        return self._listener.address

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def failed_handshakes(self) -> Mapping[str, int]:
        """Handshakes that failed, by kind (``tls``: a TLS alert, a certificate refused either way; ``other``)."""
        return self._listener.failed_handshakes

    @property
    def completed_handshakes(self) -> Mapping[str, int]:
        """Handshakes that completed, by kind (``resumed``: a TLS session ticket, ``full``); empty where not counted (picoquic)."""
        return self._listener.completed_handshakes

    def _ready(self, driver: Driver) -> None:
        conn = ServerConnection(driver)
        if self._closed:
            driver.close_aqueduct("server closed")
            return
        # Forget it when it ends (O(1): a fleet of thousands connecting must not
        # cost a scan of every open connection per handshake).
        self._connections.add(conn)
        driver.on_terminated.append(partial(self._connections.discard, conn))
        self._accepted.put_nowait(conn)

    async def accept(self) -> ServerConnection:
        """The next connection; raises ``ConnectionLost`` once the server is closed."""
        conn = await self._accepted.get()
        if conn is None:
            self._accepted.put_nowait(None)  # wake other acceptors too
            raise ConnectionLost("server closed")
        return conn

    def __aiter__(self) -> Server:
        return self

    async def __anext__(self) -> ServerConnection:
        try:
            return await self.accept()
        except ConnectionLost:
            raise StopAsyncIteration from None

    async def close(self) -> None:
        """Stop accepting, close every connection, release the port."""
        if self._closed:
            return
        self._closed = True
        self._accepted.put_nowait(None)
        conns = [c for c in self._connections if not c.is_closed]
        await asyncio.gather(*(c.close("server closed") for c in conns))
        if self._listener is not None:
            self._listener.close()

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def serve(
    host: str,
    port: int,
    *,
    certfile: PathLike,
    keyfile: PathLike | None = None,
    cafile: PathLike | None = None,
    headers: HeadersLike = None,
    middleware: Iterable[Middleware] = (),
    frame_log: PathLike | None = None,
    idle_timeout: float = 60.0,
    keepalive: bool = False,
    max_handshakes: int | None = None,
    backend: str = "aioquic",
    **options: Any,
) -> Server:
    """Listen for Aqueduct connections on ``host``:``port`` (0 = any free port).

    ``cafile`` turns on mutual TLS: clients must present a certificate signed
    by it. ``headers`` are this side's connection headers;
    ``middleware`` see/modify every message's headers; ``frame_log`` writes
    a JSON-lines frame log; ``keepalive`` sends a QUIC PING every third of
    the idle timeout so idle connections stay up (clients usually do that);
    ``max_handshakes`` bounds the handshakes in progress (aioquic's default
    64): a new client beyond it is refused at once (CONNECTION_REFUSED)
    and retries, so a storm of clients cannot stall the loop or time each
    other out (:mod:`aqueduct.runtime.backends.quic_server`); other ``options`` go
    to the core's ``ProtoConfig``. ``backend`` picks the QUIC stack
    (:data:`BACKENDS`). A picoquic server refuses, with a ``ValueError``
    saying why, what aiopquic cannot do: a host other than ``"::"`` or
    ``"0.0.0.0"`` (it listens on every interface), ``cafile`` (it cannot
    verify client certificates) and ``max_handshakes`` (its handshakes run
    in C on its own thread).
    """
    stack = _backend(backend)
    server_options = ServerOptions(
        certfile=certfile, keyfile=keyfile, cafile=cafile, idle_timeout=idle_timeout,
        max_handshakes=max_handshakes, keepalive=keepalive,
    )  # fmt: skip
    stack.check_server(host, server_options)
    server = Server()
    make_driver = _driver_maker(
        _connection_headers(headers), tuple(middleware), frame_log, options, server._ready, keepalive
    )
    server._listener = await stack.listen(host, port, server_options, make_driver)
    return server


async def connect(
    host: str,
    port: int,
    *,
    cafile: PathLike | None = None,
    verify: bool = True,
    certfile: PathLike | None = None,
    keyfile: PathLike | None = None,
    server_name: str | None = None,
    headers: HeadersLike = None,
    middleware: Iterable[Middleware] = (),
    frame_log: PathLike | None = None,
    idle_timeout: float = 60.0,
    keepalive: bool = True,
    timeout: float = 30.0,
    backend: str = "aioquic",
    token: bytes = b"",
    **options: Any,
) -> Sender:
    """Connect to an Aqueduct server; return the entrypoint :class:`Sender`.

    ``cafile`` verifies the server (``verify=False`` skips that, for tests);
    ``certfile``/``keyfile`` present a client certificate (mutual TLS).
    ``tx.connection`` gives headers, stats and ``close()``; using the Sender
    as an async context manager finishes it and closes the connection.
    ``keepalive`` (on by default) sends a QUIC PING every third of the idle
    timeout: an idle connection stays up, and a dead server is noticed
    within ``idle_timeout`` seconds (ConnectionLost on every handle).
    Raises ``ConnectionLost`` if the handshake fails (refused, TLS error,
    peer without datagram support) or takes longer than ``timeout``; a
    certificate that failed raises its subclass :class:`CertificateRefused`,
    saying in one line whose (``whose``: ``server`` or ``client``), which
    and why, on either backend.
    ``backend`` picks the QUIC stack (:data:`BACKENDS`): ``"picoquic"``
    needs the ``picoquic`` extra and cannot present a client certificate
    (refused with a ``ValueError``).
    ``token``: the turn a busy server's refusal named
    (:class:`~aqueduct.runtime.retry_hint.RetryWindow`), sent back in the
    Initial so the server keeps the client's place in its queue (aioquic;
    the picoquic backend cannot set an Initial's token and sends none).
    """
    stack = _backend(backend)
    make_driver = _driver_maker(_connection_headers(headers), tuple(middleware), frame_log, options, keepalive=keepalive)
    client = ClientOptions(
        cafile=cafile, verify=verify, certfile=certfile, keyfile=keyfile, server_name=server_name,
        idle_timeout=idle_timeout, timeout=timeout, keepalive=keepalive, token=token,
    )  # fmt: skip
    driver = await stack.dial(host, port, client, make_driver)
    connection = Connection(driver)
    entry = driver.link.entrypoint()
    assert isinstance(entry, Sender)
    give_connection(entry, connection)
    return entry
