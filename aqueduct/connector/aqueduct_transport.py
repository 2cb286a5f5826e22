"""Connector frames carried over Aqueduct channels (spec/connector-wire.md section 3).

Every payload is raw bytes holding whole frames (so a capture of payloads is
a valid connector byte stream); several frames may share a payload.

* HELLO goes on the entrypoint (ORDERED) with an attached channel whose
  Sender half goes to the worker: OK, ERROR, ACK and RESTART come back on it.
* Each NOTIFY goes on the entrypoint with an attached channel whose Sender
  half stays with the connector: that stream's MESSAGE frames go on it, in
  the stream's mode. Several NOTIFYs in one payload carry their channels as
  attachments in the same order. The channel header ``connector-mode`` tells
  the worker the mode, so its deduplication knows whether gaps can still
  fill (only in-order channels let a point of reference skip ids).
* A stream channel lost in transit means its NOTIFY never took effect: the
  link reports the session over, and the client reconnects and re-notifies
  every stream from the new OK's points of reference.

Requires ``Sender.send(payload, attachments=...)`` from the runtime: raw
bytes cannot carry a handle inside a CBOR value.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import aqueduct.runtime as rt
from aqueduct.connector.client import HandshakeFailed, WorkerBusy
from aqueduct.connector.connector_session import RUN_ENTRY_BYTES, Outgoing
from aqueduct.connector.frames import Notify, Record, RecordRun
from aqueduct.connector.worker_server import FLUSH_TIMEOUT, WorkerPeer, WorkerServer, WorkerSink
from aqueduct.connector.worker_session import WorkerConfig
from aqueduct.proto.errors import ChannelOutcome, ConnectionLost, LocalProtocolError
from aqueduct.proto.sender import Mode
from aqueduct.runtime.payload import PayloadError
from aqueduct.runtime.retry_hint import retry_within

MODE_HEADER = "connector-mode"
#: Connector payloads are always raw frames: announcing octet-stream as the
#: connection's content type spares every message a per-message
#: ``content-type`` header (39 bytes, more than a third of a small MESSAGE).
RAW_CONNECTION_HEADERS = {"content-type": "application/octet-stream"}
MAX_BATCH_BYTES = RUN_ENTRY_BYTES
"""Reliable payloads are cut near this size so one slow stream never hoards a window.

The session's run entries are no larger, so a payload cut never splits one.
"""


class AqueductLink:
    """Connector side: one Aqueduct connection carrying one session."""

    def __init__(self, entrypoint: rt.Sender, mode_of: Callable[[int], Mode]) -> None:
        self._entry = entrypoint
        self._mode_of = mode_of  # the client's choice per stream id
        self._control_tx, self._control_rx = rt.channel()
        self._streams: dict[int, rt.Sender] = {}
        self._lost = asyncio.Event()  # a stream channel failed: end the session
        self._hello_sent = False

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        mode_of: Callable[[int], Mode],
        cafile: str | None = None,
        idle_timeout: float = 10.0,
        quic_backend: str = "aioquic",
    ) -> AqueductLink:
        """Connect with keep-alive, so a dead worker is noticed within ``idle_timeout``.

        ``quic_backend`` picks the QUIC stack (``"aioquic"`` or ``"picoquic"``).

        A failed attempt (nobody answers) is a ``ConnectionError`` like a
        refused TCP connect, so the client retries with backoff; a TLS
        handshake that failed (a certificate that does not verify) is
        :class:`HandshakeFailed`, which the client gives up on.
        """
        try:
            entry = await rt.connect(
                host,
                port,
                cafile=cafile,
                idle_timeout=idle_timeout,
                keepalive=True,
                headers=RAW_CONNECTION_HEADERS,
                backend=quic_backend,
            )
        except ChannelOutcome as exc:
            if isinstance(exc, ConnectionLost) and (window := retry_within(exc)) is not None:
                raise WorkerBusy(str(exc), window) from exc
            if isinstance(exc, ConnectionLost) and exc.code is not None and _is_tls_alert(exc.code):
                verified = f"cafile {cafile}" if cafile else "the system's CAs, no cafile given"
                raise HandshakeFailed(
                    f"TLS handshake with {host}:{port} failed: {_close_reason(exc)} "
                    f"(the server's certificate was verified with {verified})"
                ) from exc
            raise ConnectionError(str(exc)) from exc
        return cls(entry, mode_of)

    async def send(self, frames: Sequence[Outgoing]) -> None:
        """Route frames: HELLO / NOTIFY / ERROR on the entrypoint, MESSAGE on its stream channel.

        A lost connection is a ``ConnectionError``, as on TCP: the client reconnects.
        """
        for route, batch in _batches(frames, self._mode_of):
            payload = b"".join(data for _, data in batch)
            if route is None:
                try:
                    await self._send_entry(batch, payload)
                except ChannelOutcome as exc:
                    raise ConnectionError(str(exc)) from exc
            else:
                await self._send_stream(route, payload)

    async def _send_entry(self, batch: list[Outgoing], payload: bytes) -> None:
        attachments: list[rt.Sender | rt.Receiver] = []
        finished: list[rt.Sender] = []
        if not self._hello_sent:
            attachments.append(self._control_tx)
            self._hello_sent = True
        for frame, _ in batch:
            if isinstance(frame, Notify):
                mode = self._mode_of(frame.stream_id)
                tx, rx = rt.channel(headers={MODE_HEADER: mode.value.encode()})
                if mode is Mode.UNORDERED:
                    tx.unordered()
                elif mode is Mode.UNRELIABLE:
                    tx.unreliable()
                replaced = self._streams.get(frame.stream_id)
                if replaced is not None:
                    finished.append(replaced)
                self._streams[frame.stream_id] = tx
                attachments.append(rx)
        await self._entry.send(payload, attachments=attachments)
        for old in finished:  # a re-NOTIFY retires the stream's previous channel
            with contextlib.suppress(ChannelOutcome, LocalProtocolError):
                await old.finish()

    async def _send_stream(self, stream_id: int, payload: bytes) -> None:
        try:
            await self._streams[stream_id].send(payload)
        except ChannelOutcome:
            self._lost.set()  # the NOTIFY's channel is gone: resume on a new session

    async def receive(self) -> bytes:
        """Next payload from the worker's control channel; ``b""`` when the session is over."""
        recv = asyncio.ensure_future(self._control_rx.recv())
        lost = asyncio.ensure_future(self._lost.wait())
        try:
            await asyncio.wait({recv, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
            if not recv.done():
                recv.cancel()
        if recv.cancelled():
            return b""
        error = recv.exception()
        if isinstance(error, rt.Finished | ChannelOutcome):
            return b""
        if error is not None:
            raise error
        value = recv.result()
        return bytes(value) if isinstance(value, bytes | bytearray | memoryview) else b""

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._entry.connection.close()


def _is_tls_alert(code: int) -> bool:
    """QUIC's CRYPTO_ERROR range (RFC 9000 section 20.1): the TLS handshake sent an alert."""
    return 0x100 <= code <= 0x1FF


def _close_reason(exc: ConnectionLost) -> str:
    """The peer's or the stack's words for the alert (``unable to get local issuer certificate``)."""
    reason = exc.reason
    head, sep, tail = reason.partition("): ")
    return tail if sep else reason


def _batches(
    frames: Sequence[Outgoing], mode_of: Callable[[int], Mode]
) -> list[tuple[int | None, list[Outgoing]]]:
    """Group consecutive frames going to the same channel into payloads.

    A run entry (:class:`RecordRun`) goes whole, on its stream's channel.
    UNRELIABLE payloads are datagrams, so those get one frame each.
    """
    out: list[tuple[int | None, list[Outgoing]]] = []
    size = 0
    unreliable = {None: False}  # route -> its payloads are datagrams (asked once per route)
    for frame, data in frames:
        route = frame.stream_id if type(frame) in _ROUTED else None
        if route not in unreliable:
            unreliable[route] = mode_of(route) is Mode.UNRELIABLE  # type: ignore[arg-type]
        if out and out[-1][0] == route and not unreliable[route] and size + len(data) <= MAX_BATCH_BYTES:
            out[-1][1].append((frame, data))
            size += len(data)
        else:
            out.append((route, [(frame, data)]))
            size = len(data)
    return out


#: Entries that go on their stream's channel; the rest go on the entrypoint.
_ROUTED = (Record, RecordRun)


# ---------------------------------------------------------------- worker side


_MODES = {mode.value.encode(): mode for mode in Mode}


def _mode_of(handle: object) -> Mode:
    """A stream channel's delivery mode, from the ``connector-mode`` header the connector set.

    Anything that is not a named mode (or not a Receiver at all) counts as
    UNORDERED: the session then never fills gaps on a guess.
    """
    if not isinstance(handle, rt.Receiver):
        return Mode.UNORDERED
    return _MODES.get(dict(handle.headers or ()).get(MODE_HEADER, b""), Mode.UNORDERED)


class _NotRaw(Exception):  # noqa: N818 - a reason, not a failure of ours
    """A connector payload that is not raw bytes; ``str()`` is the ERROR reason."""


async def _next_message(rx: rt.Receiver) -> rt.Message:
    """Next message on a connector channel; ``_NotRaw`` if its payload cannot be decoded.

    The runtime decodes a payload without a raw content type as CBOR and
    reports bad CBOR as ``PayloadError``: for a connector channel that is a
    peer breaking the carrying rule, which ends the session like a bad frame.
    """
    try:
        return await rx.recv_message()
    except PayloadError as exc:
        raise _NotRaw(f"connector payloads must be raw bytes: {exc}") from exc


def _raw_payload(message: rt.Message) -> bytes:
    """The payload's bytes; ``_NotRaw`` for any decoded value.

    ``bytes()`` must never be applied to a decoded value: a CBOR integer n
    would become n zero bytes (a tiny message allocating gigabytes).
    """
    value = message.value
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise _NotRaw(f"connector payloads must be raw bytes, got {type(value).__name__}")


async def _serve_connection(
    server: WorkerServer, sink: WorkerSink, config: WorkerConfig, conn: Any
) -> None:
    entry: rt.Receiver = conn.entrypoint
    try:
        first = await _next_message(entry)
    except (rt.Finished, ChannelOutcome):
        return
    except _NotRaw as exc:  # no control channel to carry an ERROR: say it in the close
        await conn.close(str(exc))
        return
    control = first.attachments[0] if first.attachments else None
    if not isinstance(control, rt.Sender):
        await conn.close("connector HELLO must attach the channel for the worker's replies")
        return

    async def send(data: bytes) -> None:
        await control.send(data)

    def close_reason() -> str:  # peers without a control channel read it from the close
        return peer.end_reason or "connector session ended"

    async def close_after_last_word() -> None:
        # The worker's last word (ERROR, RESTART) must reach the connector
        # before the close: a QUIC stack may drop stream data that arrives
        # with the CONNECTION_CLOSE (picoquic does), and a refused connector
        # that only sees "connection closed" retries for ever. Finishing the
        # reply channel waits until the peer has received everything on it.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(control.finish(), FLUSH_TIMEOUT)
        with contextlib.suppress(Exception):
            await conn.close(close_reason())

    closing: asyncio.Future[None] | None = None

    def close_soon() -> asyncio.Future[None]:
        """One graceful close, however many paths end the session."""
        nonlocal closing
        if closing is None:
            closing = asyncio.ensure_future(close_after_last_word())
        return closing

    peer = WorkerPeer(sink, config, send, close_soon)
    peer.remote = "quic"  # the runtime does not expose the peer's address
    readers: list[asyncio.Task[None]] = []

    async def read_stream(stream_id: int, rx: rt.Receiver) -> None:
        mode = _mode_of(rx)
        try:
            while not peer.ended:
                payload = _raw_payload(await _next_message(rx))
                await peer.receive_payload(payload, mode=mode, channel_stream=stream_id)
        except (rt.Finished, ChannelOutcome):
            return
        except _NotRaw as exc:
            await peer.fail(str(exc))
        # This stream ended the session while the entrypoint reader waits for
        # input that may never come: close once the ERROR has left.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(peer.wait_flushed(), FLUSH_TIMEOUT)
        peer.abort()

    async def feed_entry(message: rt.Message) -> None:
        payload = _raw_payload(message)
        handles = list(message.attachments)
        if message is first:
            handles = handles[1:]  # the control Sender
        # The k-th attachment is the channel of the payload's k-th NOTIFY: its
        # mode goes in with the payload, its stream id comes back out of it.
        notified = await peer.receive_payload(
            payload, mode=Mode.ORDERED, stream_modes=[_mode_of(h) for h in handles]
        )
        for stream_id, rx in zip(notified, handles, strict=False):
            if isinstance(rx, rt.Receiver) and not peer.ended:
                readers.append(asyncio.ensure_future(read_stream(stream_id, rx)))

    async def read_loop() -> None:
        try:
            message = first
            while not peer.ended:
                await feed_entry(message)
                if peer.ended:
                    return
                try:
                    message = await _next_message(entry)
                except (rt.Finished, ChannelOutcome):
                    return
        except _NotRaw as exc:
            await peer.fail(str(exc))
        finally:
            for reader in readers:
                reader.cancel()

    await server.run_peer(peer, read_loop())
    await close_soon()


async def serve_aqueduct(
    host: str,
    port: int,
    sink: WorkerSink,
    config: WorkerConfig | None = None,
    **serve_options: Any,
) -> WorkerServer:
    """Accept connectors over Aqueduct (``serve_options`` go to ``aqueduct.serve``: certfile ...)."""
    worker_config = config or WorkerConfig()
    serve_options.setdefault("headers", RAW_CONNECTION_HEADERS)
    aq_server = await rt.serve(host, port, **serve_options)
    server: WorkerServer

    connections: set[asyncio.Task[None]] = set()

    async def accept_loop() -> None:
        async for conn in aq_server:
            task = asyncio.ensure_future(_serve_connection(server, sink, worker_config, conn))
            connections.add(task)
            task.add_done_callback(connections.discard)

    acceptor = asyncio.ensure_future(accept_loop())

    async def close_listener() -> None:
        acceptor.cancel()
        await aq_server.close()

    server = WorkerServer(close_listener, aq_server.address, lambda: aq_server.failed_handshakes)
    return server
