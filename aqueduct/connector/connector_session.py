"""Sans-IO connector side of one connector session (one connection).

It enforces what the connector itself must respect (no costly frame without
a credit, MESSAGE only on an open stream) by raising
:class:`~aqueduct.proto.errors.LocalProtocolError`, and what the worker must
respect (only OK / ERROR / ACK / RESTART, in the right state) by sending ERROR
and ending the session. Outgoing frames are kept as ``(frame, bytes)`` pairs
so that a transport can route them (over Aqueduct, NOTIFY and MESSAGE frames
travel on different channels); over TCP the bytes are simply concatenated.

Resending and buffering across reconnects live in :mod:`.outbound`: a
session lives exactly as long as its connection.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate

from aqueduct.connector.batch import MessageBatch
from aqueduct.connector.events import (
    Acked,
    ConnectorEvent,
    NotifyRefused,
    RestartRequested,
    SessionAccepted,
    SessionEnded,
)
from aqueduct.connector.frames import (
    DEFAULT_MAX_FRAME_SIZE,
    EOS,
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
    encode,
    frame_name,
)
from aqueduct.connector.machine import SessionMachine, SessionOver
from aqueduct.connector.states import (
    CONNECTION_TRANSITIONS,
    STREAM_TRANSITIONS,
    ConnectionState,
    IllegalTransition,
    StreamState,
    step,
)
from aqueduct.connector.stream_refusal import parse_stream_refusal
from aqueduct.proto.errors import LocalProtocolError

C = ConnectionState

#: What :meth:`ConnectorSession.data_to_send` gives: a frame, or a run of one
#: stream's records (:class:`~aqueduct.connector.batch.MessageBatch`), with its bytes on the wire.
Outgoing = tuple[Frame | MessageBatch, bytes]

#: A run leaves the session in entries of at most this many bytes of frames
#: (one frame may be larger), so a transport that cuts its payloads near a size
#: (Aqueduct's ``MAX_BATCH_BYTES``) never has to split an entry.
RUN_ENTRY_BYTES = 64 * 1024

_LENGTH = struct.Struct(">I")  # a frame's length prefix


class NoCredits(LocalProtocolError):
    """A costly frame (NOTIFY, MESSAGE) was sent with no credit left."""


class ConnectorSession(SessionMachine[ConnectorEvent]):
    """One connection's worth of protocol state on the connector."""

    #: frame type -> (states it is legal in, handler name); absent types
    #: (HELLO, NOTIFY, MESSAGE) may never be sent to a connector.
    RECEIVE_TABLE = {
        Ok: (frozenset({C.HANDSHAKE}), "_on_ok"),
        Error: (frozenset({C.HANDSHAKE, C.STREAMING}), "_on_error"),
        Ack: (frozenset({C.STREAMING}), "_on_ack"),
        Restart: (frozenset({C.STREAMING}), "_on_restart"),
    }
    ROLE = "connector"

    def __init__(
        self,
        program_name: str,
        instance_name: str,
        cookie: bytes = b"",
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        super().__init__(FrameSplitter(max_frame_size), frame_name)
        self.program_name = program_name
        self.instance_name = instance_name
        self.cookie = cookie
        self.credits = 0
        self.streams: dict[int, StreamState] = {}
        self._out: list[Outgoing] = []

    # ------------------------------------------------------------ local calls

    def start(self) -> None:
        """Queue HELLO."""
        self._queue(Hello(PROTOCOL_VERSION, self.cookie, self.program_name, self.instance_name))
        self.state = step(CONNECTION_TRANSITIONS, self.state, "hello")

    def send(self, frame: Notify | ConnectorMessage) -> None:
        """Queue a NOTIFY or one MESSAGE (the batch of one), spending one credit."""
        if type(frame) is Notify:
            self._queue_by_the_rules(frame)
        else:
            self.send_messages((frame,))  # type: ignore[arg-type]

    def send_messages(self, records: Sequence[ConnectorMessage]) -> None:
        """Queue one stream's MESSAGEs in order, a credit each: the one way MESSAGEs leave.

        A run of data records on an open stream with a credit for each (what
        ``ConnectorStream.send_many`` makes, and a busy stream's ``send``
        calls, which the outbox gathers) is checked and encoded in one step
        (:meth:`MessageBatch.run_of <aqueduct.connector.batch.MessageBatch.run_of>`
        tells one); anything else goes by the rules record by record
        (:meth:`_queue_by_the_rules`), which raise the error the first bad
        one breaks (those before it stay queued).
        """
        n = len(records)
        run = None
        if (
            n
            and self.state is C.STREAMING
            and self.credits >= n
            and STREAM_TRANSITIONS.get((self.streams.get(records[0].stream_id, StreamState.START), "message"))
            is StreamState.OPEN  # one step of the stream's table covers the whole run
        ):
            run = MessageBatch.run_of(records)
        if run is None:
            for record in records:  # bounded by the batch
                self._queue_by_the_rules(record)
            return
        entries = _run_entries(run)
        self.credits -= n
        self._out += entries

    def _queue_by_the_rules(self, frame: Notify | ConnectorMessage) -> None:
        """Check one NOTIFY or MESSAGE against the connection's and its stream's rules, encode and queue it."""
        if self.state is not C.STREAMING:
            raise LocalProtocolError(f"{frame_name(frame)} not allowed in state {self.state.value}")
        if self.credits == 0:
            raise NoCredits(f"no credit left for {frame_name(frame)}")
        current = self.streams.get(frame.stream_id, StreamState.START)
        if isinstance(frame, Notify):
            what = "notify"
        else:
            what = "eos" if frame.flags & EOS else "message"
        try:
            new = step(STREAM_TRANSITIONS, current, what)
        except IllegalTransition as exc:
            raise LocalProtocolError(f"stream {frame.stream_id}: {exc}") from None
        encoded = encode(frame)  # validates before any state changes
        self.streams[frame.stream_id] = new
        self.credits -= 1
        self._out.append((frame, encoded))

    def data_to_send(self) -> list[Outgoing]:
        """What was queued since the last call: frames, each with its encoding, for the transport to route.

        A run queued with :meth:`send_messages` comes as :class:`~aqueduct.connector.batch.MessageBatch`
        entries (one stream's records, their frames back to back), at most
        :data:`RUN_ENTRY_BYTES` of frames each, rather than an entry per
        record: a transport routes and batches a run's records together.
        """
        out, self._out = self._out, []
        return out

    # ------------------------------------------------------------ input

    def receive_data(self, data: bytes) -> list[ConnectorEvent]:
        """Feed bytes from the worker (a TCP stream, or whole-frame payloads)."""
        return self._feed(data)

    def _on_ok(self, ok: Ok) -> None:
        self.state = step(CONNECTION_TRANSITIONS, self.state, "ok")
        self.credits = ok.credits
        self._events.append(SessionAccepted(ok.credits, ok.refs))

    def _on_ack(self, ack: Ack) -> None:
        self.credits += ack.credits
        self._events.append(Acked(ack.credits, ack.refs))

    def _on_error(self, error: Error) -> None:
        """The worker's ERROR ends the session; one refusing a stream this session notified also says which.

        A refusal of a stream the session never notified is the worker
        refusing the connector: a plain ERROR (the connector never sends a
        refused stream again, so it cannot come back to it).
        """
        refused = parse_stream_refusal(error.reason)
        if refused is not None and refused[0] in self.streams:
            self._events.append(NotifyRefused(*refused))
        super()._on_error(error)

    def _on_restart(self, restart: Restart) -> None:
        for stream_id, state in self.streams.items():
            self.streams[stream_id] = step(STREAM_TRANSITIONS, state, "restart")
        self.state = step(CONNECTION_TRANSITIONS, self.state, "restart")
        self._events += (RestartRequested(), SessionEnded("restart requested by worker", "restart"))
        raise SessionOver()  # nothing after RESTART is read

    def _send_error(self, reason: str) -> None:
        self._queue(Error(reason))

    def _queue(self, frame: Frame) -> None:
        self._out.append((frame, encode(frame)))


def _run_entries(run: MessageBatch) -> list[Outgoing]:
    """A run's entries for :meth:`ConnectorSession.data_to_send`: RUN_ENTRY_BYTES of frames at most each.

    The run is encoded at once; a run too large for one entry is cut
    between frames (each entry holds at least one), found by a binary
    search over where its frames end.
    """
    data = encode(run)
    if len(data) <= RUN_ENTRY_BYTES:  # the usual run: one entry
        return [(run, data)]
    end = _frame_ends(run, data)
    entries: list[Outgoing] = []
    first, n = 0, len(run.payloads)
    while first < n:  # bounded: every round takes at least one frame
        start = end(first - 1) if first else 0
        stop = max(bisect_right(range(n), start + RUN_ENTRY_BYTES, lo=first, key=end), first + 1)
        entries.append((run.select(range(first, stop)), data[start : end(stop - 1)]))
        first = stop
    return entries


def _frame_ends(run: MessageBatch, data: bytes) -> Callable[[int], int]:
    """Where the run's frame ``i`` ends in ``data``, as a function for the binary search.

    Its frames differ only in their payloads when all or none have an
    event time: one head size, found from the sizes, so no Python step per
    frame; otherwise read from the length prefixes.
    """
    payloads, n = run.payloads, len(run.payloads)
    if run.event_times.count(None) in (0, n):
        sizes = list(accumulate(map(len, payloads)))
        head = (len(data) - sizes[-1]) // n
        return lambda i: sizes[i] + head * (i + 1)
    ends, pos = [], 0
    for _ in range(n):  # bounded by the run
        pos += 4 + _LENGTH.unpack_from(data, pos)[0]
        ends.append(pos)
    return ends.__getitem__
