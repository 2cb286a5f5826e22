"""A Wallaroo v3 source connector for tests, written from spec/wallaroo-compat.md.

It behaves as Wallaroo's released ``AtLeastOnceSourceConnector`` does, which
cannot run here (it is built on ``asynchat``, gone in Python 3.12): HELLO,
credits from OK, NOTIFY per stream and wait for NOTIFY_ACK, whose point
overrides its own, MESSAGE frames only while it has credits (one each), ACK
points tracked per stream. On RESTART, or when the connection drops (a
bridge restart), it reconnects, re-notifies, and resumes each stream after
the point NOTIFY_ACK names (inclusive: that id is not sent again).

Its source is deterministic (stream ``s`` sends ids ``0..count-1`` as
:func:`message` makes them), so "resume from point P" is simply "send from ``P + 1``".
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from dataclasses import dataclass, field

from aqueduct.connector.wallaroo.frames import (
    NO_POINT,
    PROTOCOL_VERSION,
    EndOfStream,
    Frame,
    NotifyAck,
    WallarooAck,
    WallarooError,
    WallarooFrameSplitter,
    WallarooHello,
    WallarooMessage,
    WallarooNotify,
    WallarooOk,
    WallarooRestart,
    encode,
)

READ_SIZE = 64 * 1024


class Refused(Exception):
    """The worker sent ERROR (``str()`` is its reason)."""


def stream_id_of(name: str) -> int:
    """The released client's ``MultiSourceConnector.get_id``: 64 bits of the name's SHA-256.

    About half of all names give ids of 2^63 or more.
    """
    return int(hashlib.sha256(name.encode()).hexdigest()[:16], 16)


EVENT_TIME_BASE = 1_700_000_000_000_000  # microseconds since the Unix epoch


def payload(stream_id: int, message_id: int) -> bytes:
    return f"stream {stream_id} message {message_id}".encode()


def message(stream_id: int, message_id: int) -> WallarooMessage:
    """The MESSAGE the source sends for an id: a payload, an event time and a key."""
    key = f"k{message_id % 4}".encode()
    return WallarooMessage(stream_id, message_id, EVENT_TIME_BASE + message_id, key, payload(stream_id, message_id))


@dataclass
class ClientStats:
    """What happened, for assertions."""

    connections: int = 0
    restarts: int = 0  # RESTART frames received
    drops: int = 0  # connections lost without RESTART
    resumed_from: list[dict[int, int]] = field(default_factory=list)  # NOTIFY_ACK points per connection
    sent: int = 0  # MESSAGE frames sent, resends included
    #: ACK points lower than one received before for the stream (the released client
    #: logs "got an ack for older point of reference" and rewinds)
    older_acks: int = 0


class _Reconnect(Exception):
    """Internal: the connection is over (RESTART or dropped); start again."""


class WallarooSource:
    """Sends ``count`` messages on each of ``streams`` to a v3 worker, then EOS, until all are acked."""

    def __init__(
        self,
        port: int,
        streams: dict[int, str],
        count: int,
        *,
        program: str = "wallaroo-test",
        instance: str = "i0",
        cookie: bytes = b"",
        timeout: float = 60.0,
    ) -> None:
        self.port = port
        self.streams = streams
        self.count = count
        self.hello = WallarooHello(PROTOCOL_VERSION, cookie, program, instance)
        self.timeout = timeout
        self.acked: dict[int, int] = dict.fromkeys(streams, NO_POINT)
        self.stats = ClientStats()
        self._credits = 0
        self._credit = asyncio.Event()
        self._replies: asyncio.Queue[Frame] = asyncio.Queue()
        self._ended: WallarooRestart | WallarooError | None = None  # how the current connection ended

    @property
    def done(self) -> bool:
        last = self.count - 1
        return all(p != NO_POINT and p >= last for p in self.acked.values())

    async def run(self) -> ClientStats:
        """Send everything and wait until every message is acked; reconnect as needed."""
        deadline = time.monotonic() + self.timeout
        while not self.done:
            if time.monotonic() > deadline:
                raise TimeoutError(f"not all acked within {self.timeout} s: {self.acked}")
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.1)  # the worker is restarting
                continue
            self.stats.connections += 1
            try:
                await self._session(reader, writer, deadline)
            except (_Reconnect, ConnectionError):
                pass  # RESTART, or the worker went away: reconnect and resume
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
        return self.stats

    async def _session(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, deadline: float
    ) -> None:
        self._replies = asyncio.Queue()
        self._ended = None
        self._credits = 0
        self._credit.clear()
        pump = asyncio.create_task(self._read(reader))
        try:
            writer.write(encode(self.hello))
            ok = await self._reply(WallarooOk, deadline)
            self._grant(ok.credits)
            points: dict[int, int] = {}
            for sid, name in self.streams.items():
                await self._spend(writer, deadline)
                writer.write(encode(WallarooNotify(sid, name, self.acked[sid])))
                notify_ack = await self._reply(NotifyAck, deadline)
                if not (notify_ack.success and notify_ack.stream_id == sid):
                    raise Refused(f"stream {sid} refused: {notify_ack}")
                points[sid] = notify_ack.point_of_reference
            self.stats.resumed_from.append(dict(points))
            # Inclusive: resume after the id NOTIFY_ACK names. Streams take turns.
            todo = {sid: 0 if p == NO_POINT else p + 1 for sid, p in points.items()}
            while todo:
                for sid, mid in list(todo.items()):
                    if mid == self.count:
                        writer.write(encode(EndOfStream(sid)))  # costs no credit
                        del todo[sid]
                        continue
                    await self._spend(writer, deadline)
                    writer.write(encode(message(sid, mid)))
                    todo[sid] = mid + 1
                    self.stats.sent += 1
            await writer.drain()
            while not self.done:  # wait for the last ACKs
                await self._wait(self._credit, deadline)
                self._credit.clear()
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump

    async def _read(self, reader: asyncio.StreamReader) -> None:
        """Apply ACKs as they come, queue handshake replies, note the end (RESTART, ERROR, EOF)."""
        splitter = WallarooFrameSplitter()
        while True:
            try:
                data = await reader.read(READ_SIZE)
            except OSError:
                data = b""
            if not data:
                self.stats.drops += 1
                return self._end(WallarooRestart())
            for frame in splitter.feed(data):
                if isinstance(frame, WallarooAck):
                    for sid, point in frame.refs:
                        if sid in self.acked and (self.acked[sid] == NO_POINT or point > self.acked[sid]):
                            self.acked[sid] = point
                        elif sid in self.acked and point < self.acked[sid]:
                            self.stats.older_acks += 1
                    self._grant(frame.credits)
                elif isinstance(frame, (WallarooRestart, WallarooError)):
                    self.stats.restarts += isinstance(frame, WallarooRestart)
                    return self._end(frame)
                else:
                    self._replies.put_nowait(frame)

    def _end(self, frame: WallarooRestart | WallarooError) -> None:
        """Wake every waiter: the session is over."""
        self._ended = frame
        self._replies.put_nowait(frame)
        self._credit.set()

    def _grant(self, credits: int) -> None:
        self._credits += credits
        self._credit.set()

    async def _spend(self, writer: asyncio.StreamWriter, deadline: float) -> None:
        """Take one credit, waiting for an ACK if there is none (sending what is queued first)."""
        while self._credits == 0:
            await writer.drain()
            self._credit.clear()
            await self._wait(self._credit, deadline)
        self._credits -= 1

    async def _wait(self, event: asyncio.Event, deadline: float) -> None:
        self._check_ended()
        await asyncio.wait_for(event.wait(), max(0.0, deadline - time.monotonic()))
        self._check_ended()

    def _check_ended(self) -> None:
        if isinstance(self._ended, WallarooError):
            raise Refused(self._ended.reason)
        if self._ended is not None:
            raise _Reconnect()

    async def _reply(self, kind: type, deadline: float) -> Frame:
        frame = await asyncio.wait_for(self._replies.get(), max(0.0, deadline - time.monotonic()))
        self._check_ended()
        if not isinstance(frame, kind):
            raise AssertionError(f"expected {kind.__name__}, got {frame!r}")
        return frame
