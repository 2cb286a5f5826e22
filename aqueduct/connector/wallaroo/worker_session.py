"""Sans-IO worker side of one Wallaroo v3 connection (spec/wallaroo-compat.md).

It has :class:`~aqueduct.connector.worker_session.WorkerSession`'s interface
(``receive_data``, ``ack``, ``restart``, ``fail``, ``data_to_send``,
``connection_lost``) and reports the same events (``HelloAccepted``,
``StreamNotified``, ``RecordsAccepted``, ``SessionEnded``), so a
:class:`~aqueduct.connector.worker.server.WorkerPeer` drives it and the
bridge's ingest consumes it unchanged. Everything that differs from the
seed protocol is settled here, at the edge:

* **Points of reference.** v3 points are inclusive (the last id held,
  :data:`NO_POINT` for none), the seed's and the ingest's exclusive (the
  first id not held, 0 for none). :func:`to_v3` / :func:`from_v3` convert
  every point crossing this module, and nothing else sees a v3 point.
* **NOTIFY_ACK.** OK carries no points; each NOTIFY is answered with the
  higher of the worker's durable point (looked up at HELLO) and the
  connector's own, which is also where the ingest resumes the stream. The
  answer waits for the sink: :meth:`WallarooSession.stream_opened` sends
  success 1, :meth:`WallarooSession.refuse_stream` success 0 (say, a stream
  another connector owns), and the connection goes on with its other
  streams, as v3 allows.
* **Records.** :func:`_record` is the one place a v3 MESSAGE becomes the
  ingest's record type; EOS_MESSAGE becomes an EOS BOUNDARY record.
* **Credits.** EOS_MESSAGE costs the connector nothing, but the ingest
  returns a credit for every record it makes durable; the session keeps
  those back (``_owed``) so the connector never holds more than it was
  granted.

TCP only: input is in order, so deduplication is one number per stream
(ids below the stream's point are dropped; the log's range set drops what
an earlier session left buffered but not yet durable).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from aqueduct.connector.batch import MessageBatch
from aqueduct.connector.events import (
    HelloAccepted,
    RecordsAccepted,
    StreamNotified,
    WorkerEvent,
)
from aqueduct.connector.frames import (
    BOUNDARY,
    EOS,
    EVENT_TIME,
    KEY,
    UNSTABLE_REFERENCE,
    ConnectorMessage,
)
from aqueduct.connector.machine import WorkerMachine
from aqueduct.connector.states import (
    CONNECTION_TRANSITIONS,
    STREAM_TRANSITIONS,
    ConnectionState,
    StreamState,
    step,
)
from aqueduct.connector.wallaroo.frames import (
    NO_POINT,
    PROTOCOL_VERSION,
    EndOfStream,
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
    frame_name,
)
from aqueduct.connector.worker_session import DurableLookup, HelloRefused, WorkerConfig
from aqueduct.proto.errors import LocalProtocolError
from aqueduct.records.points import StreamPoints

C = ConnectionState


def to_v3(point: int) -> int:
    """Seed point (first id not held, 0 = nothing) -> v3 point (last id held)."""
    return point - 1 if point else NO_POINT


def from_v3(point: int) -> int:
    """v3 point (last id held, :data:`NO_POINT` = nothing) -> seed point (first id not held)."""
    return 0 if point == NO_POINT else point + 1


def _record(message: WallarooMessage) -> ConnectorMessage:
    """The ingest's record for a v3 MESSAGE (event time 0 and an empty key mean none)."""
    flags = (EVENT_TIME if message.event_time else 0) | (KEY if message.key else 0)
    return ConnectorMessage(
        flags,
        message.stream_id,
        message.message_id,
        message.event_time or None,
        message.key or None,
        message.payload,
    )


def _end_record(stream_id: int, last_id: int) -> ConnectorMessage:
    """The ingest's record for EOS_MESSAGE: an EOS BOUNDARY closing the stream's epoch.

    EOS_MESSAGE carries no id, so the record reuses the last id with
    UNSTABLE_REFERENCE: it neither moves the point of reference nor takes
    an id from (or is deduplicated against) the stream's messages.
    """
    return ConnectorMessage(EOS | BOUNDARY | UNSTABLE_REFERENCE, stream_id, last_id, payload=None)


@dataclass(slots=True)
class _Run:
    """Records of one stream received back to back: one RecordsAccepted when taken."""

    stream_id: int
    records: list[ConnectorMessage]


@dataclass(slots=True)
class _Stream:
    """One stream as this session sees it; its points are the seed's (exclusive)."""

    name: str
    points: StreamPoints
    state: StreamState = StreamState.START


class WallarooSession(WorkerMachine[WorkerEvent]):
    """One v3 connection's worth of protocol state on the worker."""

    #: frame type -> (states it is legal in, handler name). Types absent here
    #: are frames a worker may never receive (OK, NOTIFY_ACK, ACK, RESTART).
    RECEIVE_TABLE = {
        WallarooHello: (frozenset({C.CONNECTED}), "_on_hello"),
        WallarooError: (frozenset({C.CONNECTED, C.STREAMING}), "_on_error"),
        WallarooNotify: (frozenset({C.STREAMING}), "_on_notify"),
        WallarooMessage: (frozenset({C.STREAMING}), "_on_message"),
        EndOfStream: (frozenset({C.STREAMING}), "_on_end_of_stream"),
    }
    ROLE = "worker"

    def __init__(self, config: WorkerConfig, durable: DurableLookup) -> None:
        super().__init__(WallarooFrameSplitter(config.max_frame_size), frame_name)
        self.config = config
        self.program_name = ""
        self.instance_name = ""
        self.streams: dict[int, _Stream] = {}
        self._durable = durable
        self._durable_points: dict[int, int] = {}  # from HELLO's lookup, until NOTIFY
        self._unpersisted = 0  # credits of NOTIFY / duplicates, returned at once
        self._owed = 0  # credits the ingest will return for EOS records, which cost none
        self._run: _Run | None = None  # records of one stream received back to back
        self._unanswered: dict[int, int] = {}  # NOTIFYs the sink has not opened yet: stream -> point

    # ------------------------------------------------------------ inputs

    def receive_data(self, data: bytes) -> list[WorkerEvent]:
        """Feed bytes of the TCP connection; return what happened."""
        return self._feed(data)

    # ------------------------------------------------------------ sink calls

    def ack(self, refs: Iterable[tuple[int, int]] = (), credits: int = 0) -> None:
        """Send ACK: committed seed points ``(stream id, point)`` and ``credits`` more."""
        if self.ended:
            return  # the sink may finish a commit after the session died
        if self.state is not C.STREAMING:
            raise LocalProtocolError("ACK before the handshake completed")
        kept = min(credits, self._owed)
        self._owed -= kept
        self._send_ack(refs, credits - kept)

    def grant_credits(self, credits: int) -> None:
        """Send an ACK carrying only credits."""
        self.ack((), credits)

    def restart(self, address: str = "") -> list[WorkerEvent]:
        """Send RESTART: the connector reconnects (to ``address`` if given) and re-notifies."""
        return self._restart(encode(WallarooRestart(address)))

    def _terminate_streams(self) -> None:
        for stream in self.streams.values():
            stream.state = step(STREAM_TRANSITIONS, stream.state, "restart")

    # ------------------------------------------------------------ processing

    def _on_hello(self, hello: WallarooHello) -> None:
        # Named before the checks so a refusal's log line says who was refused;
        # only HelloAccepted admits the connector.
        self.program_name, self.instance_name = hello.program_name, hello.instance_name
        if hello.version != PROTOCOL_VERSION:
            raise self._fail(
                f"unsupported protocol version: got {hello.version}, expected {PROTOCOL_VERSION}"
            )
        expected = self.config.cookie
        if not expected and hello.cookie:
            raise self._fail("bad cookie: this worker expects no cookie")
        if not hmac.compare_digest(hello.cookie, expected):
            raise self._fail("bad cookie")
        self.state = step(CONNECTION_TRANSITIONS, self.state, "hello")
        try:
            known = list(self._durable(hello.program_name, hello.instance_name))
        except HelloRefused as refused:
            raise self._fail(str(refused)) from None
        self._durable_points = {s.stream_id: s.point_of_reference for s in known}
        self._credits = self.config.initial_credits
        self._out += encode(WallarooOk(self._credits))
        self.state = step(CONNECTION_TRANSITIONS, self.state, "ok")
        self._events.append(HelloAccepted(hello.program_name, hello.instance_name, self._credits, ()))

    def _on_notify(self, notify: WallarooNotify) -> None:
        self._spend_credit()
        sid = notify.stream_id
        stream = self.streams.get(sid)
        if stream is None:
            durable = StreamPoints(point=self._durable_points.pop(sid, 0))
            stream = self.streams[sid] = _Stream(notify.stream_name, durable)
        stream.state = step(STREAM_TRANSITIONS, stream.state, "notify")
        stream.name = notify.stream_name
        point = stream.points.start_from(from_v3(notify.point_of_reference))
        self._unpersisted += 1
        self._emit_gathered()  # records of other streams before it come first
        self._events.append(StreamNotified(sid, notify.stream_name, point))
        self._unanswered[sid] = point

    def stream_opened(self, stream_id: int) -> None:
        """The sink opened a NOTIFYed stream: answer NOTIFY_ACK success 1 with its point."""
        point = self._unanswered.pop(stream_id, None)
        if point is not None and not self.ended:
            self._out += encode(NotifyAck(True, stream_id, to_v3(point)))

    def refuse_stream(self, stream_id: int, reason: str) -> list[WorkerEvent]:
        """The sink refuses a NOTIFYed stream: NOTIFY_ACK success 0; the other streams go on.

        v3 refuses one stream this way (the connector must not send on
        it); ``reason`` has no place in the frame, the sink logs it.
        """
        self._unanswered.pop(stream_id, None)
        if not self.ended:
            self.streams.pop(stream_id, None)  # its MESSAGEs are refused as for a stream never opened
            self._out += encode(NotifyAck(False, stream_id, NO_POINT))
        return []

    def _open_stream(self, frame: WallarooMessage | EndOfStream) -> _Stream:
        stream = self.streams.get(frame.stream_id)
        if stream is None or stream.state is not StreamState.OPEN:
            raise self._fail(
                f"{frame_name(frame)} for stream {frame.stream_id}, which is not open "
                "(NOTIFY it and wait for NOTIFY_ACK first)"
            )
        return stream

    def _on_message(self, message: WallarooMessage) -> None:
        self._spend_credit()
        stream = self._open_stream(message)
        if message.event_time < 0:
            raise self._fail(
                f"MESSAGE: event time {message.event_time} is negative "
                "(the bridge stores microseconds since the Unix epoch)"
            )
        if stream.points.receive(range(message.message_id, message.message_id + 1)) is not None:  # a batch of one
            self._unpersisted += 1  # a duplicate from a resume: dropped, its credit returned
            return
        self._add(message.stream_id, _record(message))

    def _on_end_of_stream(self, end: EndOfStream) -> None:
        stream = self._open_stream(end)
        stream.state = step(STREAM_TRANSITIONS, stream.state, "eos")
        self._owed += 1
        self._add(end.stream_id, _end_record(end.stream_id, max(stream.points.point - 1, 0)))

    def _send_ack(self, refs: Iterable[tuple[int, int]], credits: int) -> None:
        points = tuple((sid, point - 1) for sid, point in refs if point)  # seed 0: nothing to ack
        if credits or points:
            self._credits += credits
            self._out += encode(WallarooAck(credits, points))

    def _input_handled(self) -> None:
        """Return the credits of frames that produced nothing to persist, one ACK per chunk."""
        if self._unpersisted:
            self._send_ack((), self._unpersisted)
            self._unpersisted = 0

    def _send_error(self, reason: str) -> None:
        self._out += encode(WallarooError(reason))

    # ------------------------------------------------------------ events

    def _add(self, stream_id: int, record: ConnectorMessage) -> None:
        """Gather a record; consecutive records of one stream become one RecordsAccepted."""
        run = self._run
        if run is None or run.stream_id != stream_id:
            self._emit_gathered()
            run = self._run = _Run(stream_id, [])
        run.records.append(record)

    def _emit_gathered(self) -> None:
        if self._run is not None:
            self._events.append(RecordsAccepted(self._run.stream_id, MessageBatch.of(self._run.records)))
            self._run = None
