"""Sans-IO worker side of one connector session (spec/connector-wire.md section 2).

Bytes (or whole-frame payloads) go in, events and bytes come out; no
sockets, no asyncio, no clock. Durability is pluggable: the machine asks a
``durable`` callback for the points of reference to put in OK, reports
deduplicated messages as :class:`RecordsAccepted` (one
:class:`~aqueduct.connector.batch.MessageBatch` per stream and chunk), and the sink calls
:meth:`WorkerSession.ack` once they are durable / committed.

Every protocol violation queues the exact ERROR frame and ends the session;
events for frames accepted before the bad one are still returned, so nothing
already accepted is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from aqueduct.connector.batch import MessageBatch
from aqueduct.connector.credentials import CredentialCheck
from aqueduct.connector.events import (
    HelloAccepted,
    RecordsAccepted,
    StreamNotified,
    WorkerEvent,
)
from aqueduct.connector.frames import (
    DEFAULT_MAX_FRAME_SIZE,
    PROTOCOL_VERSION,
    Ack,
    ConnectorMessage,
    Error,
    Frame,
    FrameSplitter,
    Hello,
    Notify,
    Ok,
    Restart,
    StreamRef,
    encode,
    frame_name,
)
from aqueduct.connector.inbound import DurableStream, InboundStream
from aqueduct.connector.machine import WorkerMachine
from aqueduct.connector.states import CONNECTION_TRANSITIONS, ConnectionState, step
from aqueduct.connector.stream_refusal import stream_refusal
from aqueduct.proto.errors import LocalProtocolError
from aqueduct.wire.modes import Mode

C = ConnectionState

DurableLookup = Callable[[str, str], Iterable[DurableStream]]
"""``(program_name, instance_name) -> streams`` this connector used before."""


class HelloRefused(Exception):  # noqa: N818 - a reason, not a failure of ours
    """Raised by a :data:`DurableLookup` to answer HELLO with ERROR ``str(exc)`` instead of OK.

    A draining bridge turns connectors away so (``busy: retry within ...``):
    with no OK they resume nothing there, and a reason naming a retry window
    tells them to come back later or try another bridge, not to give up.
    """


def _nothing_durable(program_name: str, instance_name: str) -> Iterable[DurableStream]:
    return ()


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Worker policy. ``cookie=b""`` means no cookie is expected (and none accepted).

    ``credentials``: who HELLO admits, when not the cookie (see
    :mod:`aqueduct.connector.credentials`): a bridge checking tokens or
    client certificates.
    """

    cookie: bytes = b""
    initial_credits: int = 4096
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    credentials: CredentialCheck | None = None


class WorkerSession(WorkerMachine[WorkerEvent]):
    """One connection's worth of protocol state on the worker."""

    #: frame type -> (states it is legal in, handler name). Types absent here
    #: are frames a worker may never receive (OK, ACK, RESTART).
    RECEIVE_TABLE = {
        Hello: (frozenset({C.CONNECTED}), "_on_hello"),
        Error: (frozenset({C.CONNECTED, C.STREAMING}), "_on_error"),
        Notify: (frozenset({C.STREAMING}), "_on_notify"),
        MessageBatch: (frozenset({C.STREAMING}), "_on_batch"),  # every MESSAGE comes in one
    }
    ROLE = "worker"

    def __init__(
        self, config: WorkerConfig | None = None, durable: DurableLookup = _nothing_durable
    ) -> None:
        self.config = config or WorkerConfig()
        # A busy stream's records arrive as MessageBatch runs (columns), taken whole.
        super().__init__(FrameSplitter(self.config.max_frame_size, runs=MessageBatch.run), frame_name)
        self.program_name = ""
        self.instance_name = ""
        self.streams: dict[int, InboundStream] = {}
        self._durable = durable
        self._unpersisted = 0  # credits of NOTIFY / duplicates, returned at once
        #: the accepted records gathered of one stream, until an event of another kind or stream
        self._batch: MessageBatch | None = None
        # What the input being read came with (set per call, read per frame):
        self._in_order = True  # its channel delivers in order (TCP, ORDERED)
        self._channel_stream: int | None = None  # the stream whose channel carried it
        #: delivery modes of the channels attached to the payload being read, one per NOTIFY
        self._notify_modes: Iterator[Mode] = iter(())

    # ------------------------------------------------------------ inputs

    def receive_data(self, data: bytes) -> list[WorkerEvent]:
        """Feed bytes of a connection carrying one frame sequence (TCP)."""
        self._in_order, self._channel_stream = True, None
        return self._feed(data)

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
        in-order input (ORDERED) may be held to increasing ids.
        ``channel_stream`` is the stream whose NOTIFY attached that channel
        (None for the entrypoint), whose MESSAGE frames are the only ones
        allowed on it. ``stream_modes`` are the modes of the channels the
        payload attaches, one per NOTIFY in frame order (over Aqueduct each
        NOTIFY attaches its stream's channel): the NOTIFY that opens a
        stream settles its mode, which decides how its point of reference
        moves (:mod:`.points`). A NOTIFY without one (TCP) is ORDERED.
        """
        self._in_order, self._channel_stream = mode is Mode.ORDERED, channel_stream
        self._notify_modes = iter(stream_modes)
        return self._feed(payload, whole=True)

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

    def stream_opened(self, stream_id: int) -> None:
        """The sink opened a NOTIFYed stream: nothing to send (this protocol has no NOTIFY answer)."""

    def refuse_stream(self, stream_id: int, reason: str) -> list[WorkerEvent]:
        """The sink refuses a NOTIFYed stream: ERROR ``stream N refused: REASON`` ends the session.

        This wire has no answer to one NOTIFY, so the session ends; the
        ERROR's fixed form (:mod:`aqueduct.connector.stream_refusal`) tells the
        connector to give up that stream alone and come back with the others.
        """
        return self.fail(stream_refusal(stream_id, reason))

    def restart(self) -> list[WorkerEvent]:
        """Send RESTART: every stream terminates, the connector reconnects and resumes."""
        return self._restart(encode(Restart()))

    def _terminate_streams(self) -> None:
        for stream in self.streams.values():
            stream.terminate()

    # ------------------------------------------------------------ processing

    def _handle(self, frames: list[Frame | MessageBatch]) -> None:
        """Handle a chunk's frames in order; MESSAGEs always as batches.

        The decoder gathers a busy stream's data records into runs; the
        MESSAGEs it did not (keys, flags, gaps) are gathered here, those of
        one stream back to back into one batch, so the rules run per batch
        on every path.
        """
        dispatch, n, i = self._dispatch, len(frames), 0
        while i < n:  # bounded: every round handles at least one frame
            frame = frames[i]
            if type(frame) is ConnectorMessage:
                j, sid = i + 1, frame.stream_id
                while j < n and type(frames[j]) is ConnectorMessage and frames[j].stream_id == sid:  # type: ignore[union-attr]
                    j += 1
                dispatch(MessageBatch.general(frames[i:j]))  # type: ignore[arg-type]
                i = j
            else:
                dispatch(frame)
                i += 1

    def _admit(self, frames: list[Frame]) -> tuple[list[Frame], str | None]:
        channel_stream = self._channel_stream
        if channel_stream is None:
            return frames, None
        for i, frame in enumerate(frames):
            if not (type(frame) in (MessageBatch, ConnectorMessage) and frame.stream_id == channel_stream):
                return frames[:i], (
                    f"{frame_name(frame)} frame on the channel of stream {channel_stream}: "
                    "only that stream's MESSAGE frames go there"
                )
        return frames, None

    def _on_hello(self, hello: Hello) -> None:
        # Named before the checks so a refusal's log line says who was refused;
        # only HelloAccepted admits the connector.
        self.program_name, self.instance_name = hello.program_name, hello.instance_name
        if hello.version != PROTOCOL_VERSION:
            raise self._fail(f"unsupported protocol version: {hello.version}")
        self._admit_hello(self.config.cookie, self.config.credentials, hello)
        self.state = step(CONNECTION_TRANSITIONS, self.state, "hello")
        try:
            known = list(self._durable(hello.program_name, hello.instance_name))
        except HelloRefused as refused:
            raise self._fail(str(refused)) from None
        for durable in known:
            self.streams[durable.stream_id] = InboundStream.from_durable(durable)
        refs = tuple(
            StreamRef(s.stream_id, s.stream_name, s.point_of_reference)
            for s in self.streams.values()
        )
        self._credits = self.config.initial_credits
        self._out += encode(Ok(self._credits, refs))
        self.state = step(CONNECTION_TRANSITIONS, self.state, "ok")
        self._emit(HelloAccepted(hello.program_name, hello.instance_name, self._credits, refs))

    def _on_notify(self, notify: Notify) -> None:
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

    def _on_batch(self, batch: MessageBatch) -> None:
        """One stream's MESSAGEs, a credit each, by the stream's rules in one call (:meth:`InboundStream.receive`).

        A duplicate's credit goes back at once (:meth:`_input_handled`); the
        records before a broken rule (or the last credit) are kept, as the
        spec wants everything before a bad frame processed.
        """
        n, credits = len(batch.payloads), self._credits
        stream = self.streams.get(batch.stream_id)
        if stream is None or not credits:
            self._credits = max(credits - 1, 0)
            raise self._fail("credit exceeded" if not credits else f"message for unknown stream {batch.stream_id}")
        count = n if credits >= n else credits
        kept, dropped, error = stream.receive(batch, self._in_order, count)
        if error is None:
            self._credits = credits - count
            if count < n:
                error = "credit exceeded"
        else:  # the record that broke a rule spent its credit too
            self._credits = credits - (0 if kept is None else len(kept.payloads)) - dropped - 1
        if dropped:
            self._unpersisted += dropped
        if kept is not None:
            self._gather(kept)
        if error is not None:
            raise self._fail(error)

    def _gather(self, batch: MessageBatch) -> None:
        """Add accepted records to the batch of their stream; another stream's starts a new one."""
        gathered = self._batch
        if gathered is not None and gathered.stream_id == batch.stream_id:
            gathered.extend(batch)
        else:
            self._emit_gathered()
            self._batch = batch

    def _input_handled(self) -> None:
        """Return the credits of frames that produced nothing to persist, one ACK per chunk."""
        if self._unpersisted and self.state is C.STREAMING:
            self._emit_gathered()
            self.ack((), self._unpersisted)
            self._unpersisted = 0

    def _send_error(self, reason: str) -> None:
        self._out += encode(Error(reason))

    # ------------------------------------------------------------ events

    def _emit(self, event: WorkerEvent) -> None:
        self._emit_gathered()
        self._events.append(event)

    def _emit_gathered(self) -> None:
        """The records gathered of one stream become one RecordsAccepted."""
        batch = self._batch
        if batch is not None:
            self._events.append(RecordsAccepted(batch.stream_id, batch))
            self._batch = None
