"""Sans-IO worker side of one connector session (spec/connector-wire.md section 2).

Bytes (or whole-frame payloads) go in, events and bytes come out; no
sockets, no asyncio, no clock. Durability is pluggable: the machine asks a
``durable`` callback for the points of reference to put in OK, reports
deduplicated messages as :class:`RecordsAccepted`, and the sink calls
:meth:`WorkerSession.ack` once they are durable / committed.

Every protocol violation queues the exact ERROR frame and ends the session;
events for frames accepted before the bad one are still returned, so nothing
already accepted is lost.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from aqueduct.connector.events import (
    HelloAccepted,
    RecordsAccepted,
    SessionEnded,
    StreamNotified,
    WorkerEvent,
)
from aqueduct.connector.frames import (
    DEFAULT_MAX_FRAME_SIZE,
    PROTOCOL_VERSION,
    Ack,
    Error,
    Frame,
    FrameSplitter,
    Hello,
    Notify,
    Ok,
    Record,
    Restart,
    StreamRef,
    encode,
    frame_name,
)
from aqueduct.connector.inbound import DurableStream, InboundStream
from aqueduct.connector.states import CONNECTION_TRANSITIONS, ConnectionState, step
from aqueduct.proto.errors import LocalProtocolError
from aqueduct.proto.sender import Mode

C = ConnectionState

DurableLookup = Callable[[str, str], Iterable[DurableStream]]
"""``(program_name, instance_name) -> streams`` this connector used before."""


def _nothing_durable(program_name: str, instance_name: str) -> Iterable[DurableStream]:
    return ()


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Worker policy. ``cookie=b""`` means no cookie is expected (and none accepted)."""

    cookie: bytes = b""
    initial_credits: int = 4096
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE


class _SessionOver(Exception):
    """Internal: stop processing input, the session just ended."""


class WorkerSession:
    """One connection's worth of protocol state on the worker."""

    #: frame type -> (states it is legal in, handler name). Types absent here
    #: are frames a worker may never receive (OK, ACK, RESTART).
    RECEIVE_TABLE: dict[type, tuple[frozenset[ConnectionState], str]] = {
        Hello: (frozenset({C.CONNECTED}), "_on_hello"),
        Error: (frozenset({C.CONNECTED, C.STREAMING}), "_on_error"),
        Notify: (frozenset({C.STREAMING}), "_on_notify"),
        Record: (frozenset({C.STREAMING}), "_on_message"),
    }

    def __init__(
        self, config: WorkerConfig | None = None, durable: DurableLookup = _nothing_durable
    ) -> None:
        self.config = config or WorkerConfig()
        self.state = C.CONNECTED
        self.program_name = ""
        self.instance_name = ""
        self.streams: dict[int, InboundStream] = {}
        self._durable = durable
        self._splitter = FrameSplitter(self.config.max_frame_size)
        self._out = bytearray()
        self._credits = 0  # credits the connector may still spend
        self._unpersisted = 0  # credits of NOTIFY / duplicates, returned at once
        self._events: list[WorkerEvent] = []
        self._batch: list[Record] = []
        self._batch_stream = -1
        #: delivery modes of the channels attached to the payload being read, one per NOTIFY
        self._notify_modes: Iterator[Mode] = iter(())
        #: RECEIVE_TABLE as dispatch uses it once per record: bound handlers, and the
        #: states as a tuple (membership by identity; a frozenset hashes the enum in Python).
        self._handlers = {
            kind: (tuple(states), getattr(self, name))
            for kind, (states, name) in self.RECEIVE_TABLE.items()
        }

    # ------------------------------------------------------------ inputs

    @property
    def ended(self) -> bool:
        """True once ERROR / RESTART was sent or received or the transport closed."""
        return self.state in (C.ERROR, C.DISCONNECTED)

    def receive_data(self, data: bytes) -> list[WorkerEvent]:
        """Feed bytes of a connection carrying one frame sequence (TCP)."""
        return self._receive(data, Mode.ORDERED, None, whole=False)

    def receive_payload(
        self,
        payload: bytes,
        *,
        mode: Mode,
        channel_stream: int | None = None,
        stream_modes: Sequence[Mode] = (),
    ) -> list[WorkerEvent]:
        """Feed one Aqueduct message payload: whole frames, back to back.

        ``mode`` is how the channel that carried the payload delivers: only
        in-order input (ORDERED) lets deduplication fill gaps.
        ``channel_stream`` is the stream whose NOTIFY attached that channel
        (None for the entrypoint), whose MESSAGE frames are the only ones
        allowed on it. ``stream_modes`` are the modes of the channels the
        payload attaches, one per NOTIFY in frame order (over Aqueduct each
        NOTIFY attaches its stream's channel): the NOTIFY that opens a
        stream settles its mode, which the durable side needs (an ORDERED
        stream's point of reference is its last id + 1, an UNORDERED one's
        the end of its contiguous ids). A NOTIFY without one (TCP) is ORDERED.
        """
        self._notify_modes = iter(stream_modes)
        return self._receive(payload, mode, channel_stream, whole=True)

    def connection_lost(self) -> list[WorkerEvent]:
        """The transport ended."""
        if self.ended:
            self.state = C.DISCONNECTED
            return []
        self.state = step(CONNECTION_TRANSITIONS, self.state, "closed")
        return [SessionEnded("connection closed", "closed")]

    # ------------------------------------------------------------ sink calls

    def ack(self, refs: Iterable[tuple[int, int]] = (), credits: int = 0) -> None:
        """Send ACK: ``credits`` more, and committed points ``(stream id, point)``."""
        if self.ended:
            return  # the sink may finish a commit after the session died
        if self.state is not C.STREAMING:
            raise LocalProtocolError("ACK before the handshake completed")
        self._credits += credits
        self._out += encode(Ack(credits, tuple(refs)))

    def grant_credits(self, credits: int) -> None:
        """Send an ACK carrying only credits."""
        self.ack((), credits)

    def restart(self) -> list[WorkerEvent]:
        """Send RESTART: every stream terminates, the connector reconnects and resumes."""
        if self.state is not C.STREAMING:
            raise LocalProtocolError(f"RESTART not allowed in state {self.state.value}")
        self._out += encode(Restart())
        for stream in self.streams.values():
            stream.terminate()
        self.state = step(CONNECTION_TRANSITIONS, self.state, "restart")
        return [SessionEnded("restart requested", "restart")]

    def fail(self, reason: str) -> list[WorkerEvent]:
        """End the session with ERROR ``reason`` (e.g. the sink failed)."""
        if self.ended:
            return []
        self._fail(reason)
        return self._take_events()

    def data_to_send(self) -> bytes:
        """Bytes queued for the transport since the last call."""
        data = bytes(self._out)
        self._out.clear()
        return data

    # ------------------------------------------------------------ processing

    def _receive(
        self, data: bytes, mode: Mode, channel_stream: int | None, *, whole: bool
    ) -> list[WorkerEvent]:
        if self.ended:
            return []  # the spec: anything after ERROR / RESTART is discarded
        self._splitter.push(data)
        frames, bad_frame = self._splitter.drain()
        in_order = mode is Mode.ORDERED
        try:
            dispatch = self._dispatch
            for frame in frames:  # those before a bad frame are handled first
                dispatch(frame, in_order, channel_stream)
            if bad_frame is not None:
                raise self._fail(str(bad_frame))
            if whole and self._splitter.buffered:
                raise self._fail(f"payload ends inside a frame ({self._splitter.buffered} bytes left)")
            self._return_unpersisted_credits()
        except _SessionOver:
            pass
        return self._take_events()

    def _dispatch(self, frame: Frame, in_order: bool, channel_stream: int | None) -> None:
        entry = self._handlers.get(type(frame))
        if entry is None:
            raise self._fail(f"{frame_name(frame)} frame may not be sent to a worker")
        states, handler = entry
        if self.state not in states:
            raise self._fail(f"{frame_name(frame)} frame not allowed in state {self.state.value}")
        if channel_stream is not None and not (
            type(frame) is Record and frame.stream_id == channel_stream
        ):
            raise self._fail(
                f"{frame_name(frame)} frame on the channel of stream {channel_stream}: "
                "only that stream's MESSAGE frames go there"
            )
        handler(frame, in_order)

    def _on_hello(self, hello: Hello, in_order: bool) -> None:
        if hello.version != PROTOCOL_VERSION:
            raise self._fail(f"unsupported protocol version: {hello.version}")
        expected = self.config.cookie
        if not expected and hello.cookie:
            raise self._fail("bad cookie: this worker expects no cookie")
        if not hmac.compare_digest(hello.cookie, expected):
            raise self._fail("bad cookie")
        self.state = step(CONNECTION_TRANSITIONS, self.state, "hello")
        self.program_name, self.instance_name = hello.program_name, hello.instance_name
        for durable in self._durable(hello.program_name, hello.instance_name):
            self.streams[durable.stream_id] = InboundStream.from_durable(durable)
        refs = tuple(
            StreamRef(s.stream_id, s.stream_name, s.point_of_reference)
            for s in self.streams.values()
        )
        self._credits = self.config.initial_credits
        self._out += encode(Ok(self._credits, refs))
        self.state = step(CONNECTION_TRANSITIONS, self.state, "ok")
        self._emit(HelloAccepted(hello.program_name, hello.instance_name, self._credits, refs))

    def _on_error(self, error: Error, in_order: bool) -> None:
        self._flush_batch()
        self.state = step(CONNECTION_TRANSITIONS, self.state, "error")
        self._events.append(SessionEnded(error.reason, "peer"))
        raise _SessionOver()

    def _spend_credit(self) -> None:
        if self._credits == 0:
            raise self._fail("credit exceeded")
        self._credits -= 1

    def _on_notify(self, notify: Notify, in_order: bool) -> None:
        self._spend_credit()
        stream = self.streams.get(notify.stream_id)
        if stream is None:
            stream = self.streams[notify.stream_id] = InboundStream(
                notify.stream_id, notify.stream_name
            )
        mode = next(self._notify_modes, Mode.ORDERED)
        point = stream.notify(notify.stream_name, notify.point_of_reference, mode)
        self._unpersisted += 1
        self._emit(StreamNotified(notify.stream_id, notify.stream_name, point, mode))

    def _on_message(self, message: Record, in_order: bool) -> None:
        self._spend_credit()
        stream = self.streams.get(message.stream_id)
        if stream is None or not stream.accepts(message, in_order):
            raise self._fail(f"message for unknown stream {message.stream_id}")
        if stream.out_of_order(message, in_order):
            raise self._fail(
                f"MESSAGE: id {message.message_id} not above {stream.last_id} on stream "
                f"{message.stream_id} (ids must increase)"
            )
        if not stream.receive(message, in_order):
            self._unpersisted += 1
            return
        if self._batch_stream != message.stream_id:
            self._flush_batch()
            self._batch_stream = message.stream_id
        self._batch.append(message)

    def _return_unpersisted_credits(self) -> None:
        if self._unpersisted and self.state is C.STREAMING:
            self._flush_batch()
            self.ack((), self._unpersisted)
            self._unpersisted = 0

    def _fail(self, reason: str) -> _SessionOver:
        """Queue ERROR ``reason`` and end the session; the caller raises the result."""
        self._flush_batch()
        self._out += encode(Error(reason))
        self.state = step(CONNECTION_TRANSITIONS, self.state, "error")
        self._events.append(SessionEnded(reason, "local"))
        return _SessionOver()

    # ------------------------------------------------------------ events

    def _emit(self, event: WorkerEvent) -> None:
        self._flush_batch()
        self._events.append(event)

    def _flush_batch(self) -> None:
        if self._batch:
            self._events.append(RecordsAccepted(self._batch_stream, tuple(self._batch)))
            self._batch = []
        self._batch_stream = -1

    def _take_events(self) -> list[WorkerEvent]:
        self._flush_batch()
        events, self._events = self._events, []
        return events
