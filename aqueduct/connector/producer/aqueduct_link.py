"""Producer side of connector frames over Aqueduct: :class:`AqueductLink`.

One Aqueduct connection carries one connector session; the carrying rules
both sides share (raw payloads, the NOTIFY's attached stream channel, the
``connector-mode`` header) are in :mod:`aqueduct.connector.carrying`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

import aqueduct.runtime as rt
from aqueduct.connector.batch import MessageBatch
from aqueduct.connector.carrying import MODE_HEADER, RAW_CONNECTION_HEADERS
from aqueduct.connector.connector_session import RUN_ENTRY_BYTES, Outgoing
from aqueduct.connector.errors import HandshakeFailed, WorkerBusy
from aqueduct.connector.frames import ConnectorMessage, Notify
from aqueduct.proto.errors import ChannelOutcome, ConnectionLost, LocalProtocolError
from aqueduct.runtime.retry_hint import retry_window
from aqueduct.wire.modes import Mode

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
        certfile: str | None = None,
        keyfile: str | None = None,
        handshake_timeout: float | None = None,
        turn: bytes = b"",
    ) -> AqueductLink:
        """Connect with keep-alive, so a dead worker is noticed within ``idle_timeout``.

        ``quic_backend`` picks the QUIC stack (``"aioquic"`` or ``"picoquic"``);
        ``certfile``/``keyfile`` present a client certificate (mutual TLS);
        ``handshake_timeout`` bounds the handshake (default: the runtime's);
        ``turn``: the place a busy worker's last refusal named, sent back so
        the worker keeps it (:class:`WorkerBusy`).

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
                certfile=certfile,
                keyfile=keyfile,
                idle_timeout=idle_timeout,
                keepalive=True,
                headers=RAW_CONNECTION_HEADERS,
                backend=quic_backend,
                token=turn,
                **({} if handshake_timeout is None else {"timeout": handshake_timeout}),
            )
        except ChannelOutcome as exc:
            if isinstance(exc, ConnectionLost) and (window := retry_window(exc)) is not None:
                raise WorkerBusy(str(exc), window.within, window.not_before, window.turn) from exc
            if isinstance(exc, rt.CertificateRefused):  # it says whose certificate failed, and why
                raise HandshakeFailed(f"TLS handshake with {host}:{port} failed: {exc.words}") from exc
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
        """Next payload from the worker's control channel; ``b""`` when the session is over.

        A lost connection is a ``ConnectionError`` saying why it ended.
        """
        recv = asyncio.ensure_future(self._control_rx.recv())
        lost = asyncio.ensure_future(self._lost.wait())
        try:
            await asyncio.wait({recv, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
            if not recv.done():
                recv.cancel()
            elif not recv.cancelled():
                # Retrieved here too: when this call is cancelled just as the connection
                # ended (a stateless reset at a restart), nothing below reads it, and the
                # loop would print "Task exception was never retrieved" with a traceback.
                recv.exception()
        if recv.cancelled():
            return b""
        error = recv.exception()
        if isinstance(error, ConnectionLost):  # its cause (a reset, an idle timeout) is the client's reason to log
            raise ConnectionError(str(error))
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

    A run entry (:class:`~aqueduct.connector.batch.MessageBatch`) goes whole, on its stream's channel.
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
_ROUTED = (ConnectorMessage, MessageBatch)
