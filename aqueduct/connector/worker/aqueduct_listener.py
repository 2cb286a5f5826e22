"""Worker side of connector frames over Aqueduct: :func:`serve_aqueduct`.

Each accepted connection runs one worker session: the HELLO's attached
channel carries the worker's replies, each NOTIFY's attached channel that
stream's MESSAGEs in its mode. The carrying rules both sides share are in
:mod:`aqueduct.connector.carrying`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aqueduct.runtime as rt
from aqueduct.connector.carrying import MODE_HEADER, RAW_CONNECTION_HEADERS
from aqueduct.connector.worker.server import CLOSING_TIMEOUT, WorkerPeer, WorkerServer, WorkerSink
from aqueduct.connector.worker_session import WorkerConfig
from aqueduct.proto.errors import ChannelOutcome
from aqueduct.runtime.handles.payload import PayloadError
from aqueduct.wire.modes import Mode

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
            await asyncio.wait_for(control.finish(), CLOSING_TIMEOUT)
        with contextlib.suppress(Exception):
            await conn.close(close_reason())

    closing: asyncio.Future[None] | None = None

    def close_soon() -> asyncio.Future[None]:
        """One graceful close, however many paths end the session."""
        nonlocal closing
        if closing is None:
            closing = asyncio.ensure_future(close_after_last_word())
        return closing

    peer = WorkerPeer(sink, config, send, close_soon, certificate_subject=conn.peer_certificate_subject)
    address = conn.peer_address
    peer.remote = f"quic {address[0]}:{address[1]}" if address else "quic"
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
            await asyncio.wait_for(peer.wait_sent(), CLOSING_TIMEOUT)
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

    server = WorkerServer(
        close_listener, aq_server.address, lambda: aq_server.failed_handshakes, lambda: aq_server.completed_handshakes
    )
    return server
