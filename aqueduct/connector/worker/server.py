"""Transport-independent glue between a worker session and a pluggable sink.

A *sink* is the worker's application: the bridge's ingest server in
production, a small in-memory double in tests. It answers OK's points of
reference (``durable_streams``) and receives every session event
(``handle``); it talks back through the :class:`WorkerPeer` it is given
(``ack``, ``grant_credits``, ``restart``, ``fail``), from any task, at any
time (e.g. when Spark commits a micro-batch).

Transports (:mod:`.tcp_listener`, :mod:`.aqueduct_listener`) only move bytes: they
feed input to :meth:`WorkerPeer.receive_data` / :meth:`WorkerPeer.receive_payload`
and give the peer an async ``send`` for its output.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Protocol

from aqueduct.auth.identity import Identity
from aqueduct.connector.events import SessionEnded, StreamNotified, WorkerEvent
from aqueduct.connector.inbound import DurableStream
from aqueduct.connector.worker_session import DurableLookup, WorkerConfig, WorkerSession
from aqueduct.wire.modes import Mode

SessionFactory = Callable[[WorkerConfig, DurableLookup], WorkerSession]
"""Makes a connection's sans-IO session: a :class:`WorkerSession`, or for another wire one
with the same interface and events (:class:`~aqueduct.connector.wallaroo.worker_session.WallarooSession`)."""

CLOSING_TIMEOUT = 5.0
"""Seconds a closing session waits for its last frames to leave."""


class WorkerSink(Protocol):
    """What a worker transport needs from the application behind it."""

    def durable_streams(self, program_name: str, instance_name: str) -> Iterable[DurableStream]:
        """Streams this connector used before, with their durable points (for OK)."""
        ...

    async def handle(self, peer: WorkerPeer, event: WorkerEvent) -> None:
        """Consume one session event (awaited in order, before more input is read)."""
        ...


class WorkerPeer:
    """One connector session as the sink sees it.

    Calls are synchronous and safe from any task of the loop: output is
    queued in the session and a writer task sends it.
    """

    def __init__(
        self,
        sink: WorkerSink,
        config: WorkerConfig,
        send: Callable[[bytes], Awaitable[None]],
        abort: Callable[[], None],
        session_factory: SessionFactory = WorkerSession,
        certificate_subject: str | None = None,
        certificate_required: bool = False,
    ) -> None:
        self.sink = sink
        self.session = session_factory(config, sink.durable_streams)
        #: the client certificate TLS verified, if any: part of the credential HELLO is admitted by
        self.session.certificate_subject = certificate_subject
        self.session.certificate_required = certificate_required
        self._send = send
        self.abort = abort  # close the transport now (the reader then reports the loss)
        #: why the session ended (the SessionEnded reason), for the transport's close
        self.end_reason: str | None = None
        #: where the connector is, for log lines (``tcp 10.0.0.7:51234``; set by the transport)
        self.remote = ""
        self._wake = asyncio.Event()
        self._closed = asyncio.Event()
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    @property
    def program_name(self) -> str:
        return self.session.program_name

    @property
    def instance_name(self) -> str:
        return self.session.instance_name

    @property
    def identity(self) -> Identity | None:
        """Who HELLO admitted (None before HELLO): what each NOTIFY is checked against."""
        return self.session.identity

    @property
    def ended(self) -> bool:
        return self.session.ended

    # ------------------------------------------------------------ sink -> connector

    def ack(self, refs: Iterable[tuple[int, int]] = (), credits: int = 0) -> None:
        """ACK committed points ``(stream id, point)`` and grant ``credits``."""
        self.session.ack(refs, credits)
        self._wake.set()

    def grant_credits(self, credits: int) -> None:
        self.ack((), credits)

    async def restart(self) -> None:
        """Ask the connector to reconnect and resume from the durable points."""
        await self._deliver(self.session.restart())

    async def fail(self, reason: str) -> None:
        """End the session with ERROR ``reason``."""
        await self._deliver(self.session.fail(reason))

    async def refuse_stream(self, stream_id: int, reason: str) -> None:
        """Refuse one NOTIFYed stream: per stream where the protocol can (Wallaroo v3), else ERROR."""
        await self._deliver(self.session.refuse_stream(stream_id, reason))

    # ------------------------------------------------------------ transport -> session

    async def receive_data(self, data: bytes) -> None:
        await self._deliver(self.session.receive_data(data))

    async def receive_payload(
        self,
        payload: bytes,
        *,
        mode: Mode,
        channel_stream: int | None = None,
        stream_modes: Sequence[Mode] = (),
    ) -> list[int]:
        """Feed one payload (see :meth:`WorkerSession.receive_payload`); return the streams it notified.

        The ids come in NOTIFY order, which is the order of the channels the
        payload attached: the transport pairs them without parsing again.
        """
        events = self.session.receive_payload(
            payload, mode=mode, channel_stream=channel_stream, stream_modes=stream_modes
        )
        await self._deliver(events)
        return [e.stream_id for e in events if isinstance(e, StreamNotified)]

    async def connection_lost(self) -> None:
        await self._deliver(self.session.connection_lost())

    async def wait_sent(self) -> None:
        """Wait until the output that ended the session (ERROR / RESTART) was sent."""
        self._wake.set()
        await self._closed.wait()

    async def _deliver(self, events: list[WorkerEvent]) -> None:
        self._wake.set()  # replies (OK, ERROR, credit ACKs) first: they do not depend on the sink
        for event in events:
            if isinstance(event, SessionEnded) and self.end_reason is None:
                self.end_reason = event.reason
            await self.sink.handle(self, event)
            if isinstance(event, StreamNotified):
                self.session.stream_opened(event.stream_id)  # unless the sink refused it meanwhile
        self._wake.set()

    async def _write_loop(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                data = self.session.data_to_send()
                if data:
                    await self._send(data)
                if self.session.ended and not self._wake.is_set():
                    break
        except (ConnectionError, OSError):
            pass  # the reader sees the same failure and reports connection_lost
        finally:
            self._closed.set()

    async def aclose(self) -> None:
        self._writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._writer
        self._closed.set()


class WorkerServer:
    """A listening worker: ``close()`` stops accepting and ends live sessions."""

    def __init__(
        self,
        close_listener: Callable[[], Awaitable[None]],
        address: tuple[str, int],
        failed_handshakes: Callable[[], Mapping[str, int]] = dict,
        completed_handshakes: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self._close_listener = close_listener
        self.address = address
        #: transport handshakes that failed before any session, by kind (QUIC: ``tls``, ``other``)
        self.failed_handshakes = failed_handshakes
        #: transport handshakes that completed, by kind (QUIC on aioquic: ``full``, ``resumed``)
        self.completed_handshakes = completed_handshakes
        self.peers: set[WorkerPeer] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        return self.address[1]

    async def run_peer(self, peer: WorkerPeer, read_loop: Awaitable[None]) -> None:
        """Serve one connection: ``read_loop`` feeds the peer until EOF or the session ends."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.peers.add(peer)
        try:
            with contextlib.suppress(ConnectionError, OSError):
                await read_loop
            if peer.ended:  # let the ERROR / RESTART reach the connector before closing
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(peer.wait_sent(), CLOSING_TIMEOUT)
            await peer.connection_lost()
        finally:
            await peer.aclose()
            peer.abort()
            self.peers.discard(peer)
            self._tasks.discard(task)

    async def close(self) -> None:
        await self._close_listener()
        for peer in list(self.peers):
            peer.abort()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=CLOSING_TIMEOUT)

    async def __aenter__(self) -> WorkerServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
