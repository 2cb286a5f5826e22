"""Connector-side stream bookkeeping that outlives connections (sans-IO).

The client library keeps, per stream, every reliable message the worker has
not yet acknowledged as committed. Two points of reference play different
roles (spec/connector-wire.md): OK's point ``P`` says where the worker's
*durable* state ends, so after RESTART or a lost connection only buffered
messages from ``P`` on are re-sent after a fresh NOTIFY; ACK's points say
what is *committed downstream*, and only they release buffered messages and
move ``acked``. A message below ``P`` is safe from loss but not yet
committed, so it stays buffered (and counted as un-acked) until an ACK
covers it. The caller never re-sends anything itself. EPHEMERAL messages
are at-most-once and are never buffered.

:class:`Outbox` orders the frames to send on the current connection; the
driver takes as many as it has credits for.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from aqueduct.connector.connector_session import ConnectorSession
from aqueduct.connector.errors import StreamRefused
from aqueduct.connector.events import Acked, ConnectorEvent, SessionAccepted
from aqueduct.connector.frames import (
    EOS,
    EPHEMERAL,
    EVENT_TIME,
    ConnectorMessage,
    Notify,
    StreamRef,
)
from aqueduct.connector.states import ConnectionState
from aqueduct.proto.errors import LocalProtocolError
from aqueduct.wire.modes import Mode

ORDERED = Mode.ORDERED
UNORDERED = Mode.UNORDERED
UNRELIABLE = Mode.UNRELIABLE

#: the fewest records of one stream a turn of the re-sends after a new OK takes (see :meth:`Outbox.connected`),
#: and the pieces a turn is queued in: a turn goes to the session as one run, so a small OK grant does not cut
#: the re-sends into single records
RESEND_TURN = 16


@dataclass
class OutboundStream:
    """One stream as the connector sees it, across connections."""

    stream_id: int
    stream_name: str
    mode: Mode = Mode.ORDERED
    next_id: int = 0
    #: point of reference the latest OK gave for this stream (None: never seen)
    resume_from: int | None = None
    #: latest committed point of reference (from ACK)
    acked: int = 0
    closed: bool = False  # EOS sent, not re-notified since
    unacked: deque[ConnectorMessage] = field(default_factory=deque)
    #: why the worker refused the stream, for good (None: not refused); see :meth:`refuse`
    refused: StreamRefused | None = None

    def claim(self, count: int, ephemeral: bool, message_id: int | None = None) -> int | None:
        """Take the ids of the next ``count`` records; return the first (None: EPHEMERAL records have none).

        The stream's rules for what it may send, in one place for one
        record and a run: nothing after EOS, only EPHEMERAL records on an
        UNRELIABLE stream, ids that increase (UNORDERED: one by one).
        ``message_id`` is an explicit first id; by default the next one.
        A refused stream takes nothing: its refusal is raised.
        """
        if self.refused is not None:
            raise self.refused
        if self.closed:
            raise LocalProtocolError(f"stream {self.stream_id} is closed (EOS sent); re-open it")
        if ephemeral:
            return None
        if self.mode is Mode.UNRELIABLE:
            raise LocalProtocolError("UNRELIABLE streams carry EPHEMERAL messages only")
        first = self.next_id if message_id is None else message_id
        if first != self.next_id and (first < self.next_id or self.mode is Mode.UNORDERED):
            rule = "must be consecutive" if self.mode is Mode.UNORDERED else "must increase"
            raise LocalProtocolError(
                f"stream {self.stream_id}: message id {first} {rule} (next is {self.next_id})"
            )
        self.next_id = first + count
        return first

    def keep(self, messages: list[ConnectorMessage]) -> list[ConnectorMessage]:
        """Buffer the records just built on :meth:`claim`'s ids until an ACK covers them; EOS closes the stream.

        ``messages`` are one call's: all EPHEMERAL or all reliable, and only
        the last may be an EOS. Returns them, to be queued.
        """
        if messages[0].message_id is not None:
            self.unacked.extend(messages)
        if messages[-1].flags & EOS:
            self.closed = True
        return messages

    def make_message(
        self,
        payload: bytes | None,
        message_id: int | None = None,
        event_time: int | None = None,
        ephemeral: bool = False,
    ) -> ConnectorMessage:
        """Build the next data MESSAGE, assigning an id, and buffer it if reliable.

        A data record (no key, BOUNDARY, EOS or UNSTABLE_REFERENCE) is what
        :meth:`ConnectorMessage.build` makes of these, built directly: a
        keyword call per record is a visible share of a producer's CPU.
        Any other record is built by ``build`` on an id from :meth:`claim`
        and kept with :meth:`keep`.
        """
        mid = self.claim(1, ephemeral, message_id)
        flags = (EPHEMERAL if mid is None else 0) | (0 if event_time is None else EVENT_TIME)
        message = ConnectorMessage(flags, self.stream_id, mid, event_time, None, payload)
        if mid is not None:
            self.unacked.append(message)
        return message

    def make_messages(
        self, payloads: Sequence[bytes], event_times: Sequence[int | None] | None, ephemeral: bool
    ) -> list[ConnectorMessage]:
        """Build the next data MESSAGEs at once (as :meth:`make_message` each), buffering them if reliable."""
        first = self.claim(len(payloads), ephemeral)
        sid, n = self.stream_id, len(payloads)
        times = [None] * n if event_times is None else event_times
        if first is None:
            ids: Iterable[int | None] = [None] * n
            base = EPHEMERAL
        else:
            ids = range(first, first + n)
            base = 0
        return self.keep(
            [
                ConnectorMessage(base if t is None else base | EVENT_TIME, sid, m, t, None, p)
                for m, t, p in zip(ids, times, payloads, strict=True)
            ]
        )

    def refuse(self, rule: str) -> list[ConnectorMessage]:
        """The worker refused the stream for ``rule``: give it up; return the records it will never commit.

        From now on it sends nothing (:meth:`claim` raises the refusal) and
        is never notified again (:meth:`resume` plans nothing); the records
        buffered are dropped, for the caller to report. A second refusal
        (another connection's) changes nothing.
        """
        if self.refused is not None:
            return []
        self.refused = StreamRefused(self.stream_id, self.stream_name, rule)
        dropped = list(self.unacked)
        self.unacked.clear()
        return dropped

    def notify_point(self) -> int:
        """Where a (re-)NOTIFY resumes: the oldest unacked id, else the next id."""
        return self.unacked[0].message_id if self.unacked else self.next_id  # type: ignore[return-value]

    def on_ack(self, point: int) -> None:
        """The worker committed everything below ``point``."""
        self.acked = max(self.acked, point)
        self._drop_below(point)

    def resume(self, point: int | None) -> tuple[Notify, list[ConnectorMessage]] | None:
        """Plan the NOTIFY and re-sends for a new connection whose OK gave ``point``.

        Messages below ``point`` are durable on the worker, so they are not
        re-sent, but they stay buffered: only an ACK says they are committed.
        Returns None when there is nothing to do (stream finished with EOS
        and everything up to it durable, or refused by a worker).

        A worker whose point is below what is already acked (another bridge
        committed those records, or this one lost them) is notified from the
        oldest record still unacked: the ids between will never come, and a
        worker expecting them would hold its point there for good.
        """
        if point is not None:
            self.resume_from = point
            self.next_id = max(self.next_id, point)
        elif self.resume_from is None:
            self.resume_from = self.next_id
        if self.refused is not None:
            return None
        resend = [m for m in self.unacked if point is None or m.message_id >= point]  # type: ignore[operator]
        if self.closed and not resend:
            return None
        notify_at = self.notify_point() if point is None else max(point, self.notify_point())
        return Notify(self.stream_id, self.stream_name, notify_at), resend

    def _drop_below(self, point: int) -> None:
        unacked = self.unacked
        if not unacked or unacked[0].message_id >= point:  # type: ignore[operator]
            return
        # Ids increase along the buffer, so at most ``point - first`` of them are
        # below the point; when the k-th is, exactly k are (the usual case, ids
        # one by one), and they go without a comparison each.
        k = min(point - unacked[0].message_id, len(unacked))  # type: ignore[operator]
        popleft = unacked.popleft
        if unacked[k - 1].message_id < point:  # type: ignore[operator]
            for _ in range(k):
                popleft()
        else:  # ids skipped (a resume moved next_id): the k-th is at or above the point
            while unacked[0].message_id < point:  # type: ignore[operator]
                popleft()


class Outbox:
    """The frames still to send on the current connection, in order.

    ``streams`` may be shared by several outboxes, one per connection of a
    connector that sends every stream to several workers at once: each
    plans its own connection's NOTIFYs and re-sends, and an ACK on any of
    them releases the records for all.
    """

    def __init__(self, streams: dict[int, OutboundStream] | None = None) -> None:
        self.streams: dict[int, OutboundStream] = {} if streams is None else streams
        self.refs: dict[int, int] = {}  # points of reference from the latest OK
        self.resent = 0  # messages queued again by reconnects
        #: a NOTIFY, or one stream's records queued together (one for ``send``, a round for ``send_many``)
        self._queue: deque[Notify | list[ConnectorMessage]] = deque()
        self._frames = 0  # frames in the queue, a run counting each of its records

    def __len__(self) -> int:
        return self._frames

    def connected(self, refs: Iterable[StreamRef], credits: int = 0) -> None:
        """A new session started: re-notify every stream and re-send what OK does not cover, round robin.

        Every NOTIFY goes first, then the re-sends take turns across the
        streams, oldest first, each turn an equal share of the ``credits``
        the OK granted (at least :data:`RESEND_TURN` records). A query
        waiting for this producer's records (a batch planned on a bridge
        that died since) needs the oldest of *each* stream: stream after
        stream, the bridge would have to admit all of one stream's buffer
        before the next stream's first record, so one over ``--max-lag``
        (which admits a share of it) could wait for good.
        """
        self.refs = {ref.stream_id: ref.point_of_reference for ref in refs}
        self._queue.clear()  # unsent EPHEMERAL messages die with the connection
        self._frames = 0
        resends: list[list[ConnectorMessage]] = []
        for stream in self.streams.values():
            plan = stream.resume(self.refs.get(stream.stream_id))
            if plan is not None:
                notify, resend = plan
                self.push(notify)
                if resend:
                    resends.append(resend)
                self.resent += len(resend)
        turn = max(RESEND_TURN, credits // max(1, len(resends)))
        for start in range(0, max(map(len, resends), default=0), turn):  # bounded by the longest buffer
            for resend in resends:
                end = min(start + turn, len(resend))
                # In pieces, which the session gets as one run (``send_into``): a whole turn
                # as one would be copied at every split where the credits end.
                for at in range(start, end, RESEND_TURN):
                    self.push(resend[at : min(at + RESEND_TURN, end)])

    def open(self, stream_id: int, name: str, mode: Mode) -> OutboundStream:
        """Open a new stream or re-open one closed by EOS; queue its NOTIFY (a refused one raises its refusal)."""
        stream = self.streams.get(stream_id)
        if stream is not None and stream.refused is not None:
            raise stream.refused
        reopened = stream is not None
        if stream is None:
            stream = self.streams[stream_id] = OutboundStream(stream_id, name, mode)
        else:
            stream.stream_name, stream.mode, stream.closed = name, mode, False
        self.notify(stream, reopened)
        return stream

    def notify(self, stream: OutboundStream, reopened: bool) -> None:
        """Queue the NOTIFY of a stream just opened (by :meth:`open`, this outbox's or another's sharing it).

        A new stream starts from this connection's OK point; a re-opened
        one from its oldest unacked record (what is unacked was already
        sent on this connection).
        """
        plan = stream.resume(None if reopened else self.refs.get(stream.stream_id))
        assert plan is not None  # an open stream always gets a NOTIFY
        self.push(plan[0])

    def push(self, item: Notify | list[ConnectorMessage]) -> None:
        """Queue a NOTIFY, or one stream's records (taken, and handed to the session, together)."""
        self._queue.append(item)
        self._frames += 1 if type(item) is Notify else len(item)  # type: ignore[arg-type]

    def take(self, limit: int) -> list[Notify | list[ConnectorMessage]]:
        """Pop up to ``limit`` frames (one credit each); a run is split where the limit falls."""
        queue, taken, left = self._queue, [], min(limit, self._frames)
        self._frames -= left
        while left:  # bounded: every round takes at least one frame
            item = queue.popleft()
            if type(item) is list:
                if len(item) > left:
                    queue.appendleft(item[left:])
                    item = item[:left]
                left -= len(item)
            else:
                left -= 1
            taken.append(item)
        return taken

    def apply(self, event: ConnectorEvent) -> None:
        """Update the bookkeeping from a session event (OK -> resume plan, ACK -> drop acked)."""
        if isinstance(event, SessionAccepted):
            self.connected(event.refs, event.credits)
        elif isinstance(event, Acked):
            for stream_id, point in event.refs:
                stream = self.streams.get(stream_id)
                if stream is not None:
                    stream.on_ack(point)

    def send_into(self, session: ConnectorSession) -> int:
        """Hand the session as many queued frames as it has credits; return how many were MESSAGEs.

        Consecutive records of one stream go to the session together
        (:meth:`ConnectorSession.send_messages`), whether ``send_many``
        queued them together or ``send`` one by one: the session checks and
        encodes a run in one step.
        """
        if session.state is not ConnectionState.STREAMING:
            return 0
        messages = 0
        run: list[ConnectorMessage] = []
        for item in self.take(session.credits):
            records = item if type(item) is list else None
            if run and (records is None or run[0].stream_id != records[0].stream_id):
                session.send_messages(run)
                run = []
            if records is None:  # a NOTIFY
                session.send(item)  # type: ignore[arg-type]
            else:
                run += records
                messages += len(records)
        if run:
            session.send_messages(run)
        return messages
