"""The sender half of one channel (spec section 4): numbering, modes, window, finish/cancel.

States (``SenderState``)::

    OPEN --finish()--> FINISHING (queue not empty) --queue drained--> FINISHED
    OPEN --finish()--> FINISHED (FINISH_SENDER sent)
    OPEN/FINISHING --cancel()--> CANCELLED (CANCEL_SENDER sent, message streams reset)
    any --CLOSE_RECEIVER--> gone (the connection drops the state)

Streams: one control stream, opened lazily (``ROUTE_TO SENT_UNRELIABLE*
(FINISH_SENDER | CANCEL_SENDER)``); ORDERED keeps one message stream;
UNORDERED opens one stream per MESSAGE (FIN right after it); UNRELIABLE
sends one datagram per MESSAGE and falls back to an UNORDERED-style stream
(reliable number space) when the datagram would be too big. A oneshot
channel sends ``ROUTE_TO MESSAGE(0) FINISH_SENDER(1)`` on one stream.

Numbers are assigned when a message actually leaves (not when it is queued),
so an evicted unreliable message leaves no hole in the number space.

Besides the window, two local bounds apply: at most ``max_open_streams``
per-message streams may be sent and not yet acked (QUIC implementations scan
every stream they hold per packet), and a reliable queue counts as full at
``max_queued`` messages or ``max_queued_bytes`` payload bytes.

Like the intake, a sender returns what happened instead of calling back:
``send`` how many messages it took, each frame from the receiver a
:class:`FeedbackTaken` (events for the application, channels lost), and
what the connection must arrange besides (a SENT_UNRELIABLE report) waits
in ``report`` for the connection to take after the call. What it is told
up front comes in one :class:`SenderConfig`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NoReturn

from aqueduct.proto.errors import LocalProtocolError, RemoteProtocolError
from aqueduct.proto.events import (
    ChannelFinished,
    Event,
    MessagesAcked,
    ReceiverWasClosed,
    SendWindowOpened,
)
from aqueduct.proto.flow import SendWindow, message_head
from aqueduct.proto.output import RESET_CANCELLED, Output, route_to
from aqueduct.proto.stats import ChannelStats, ConnectionStats
from aqueduct.proto.transit import TransitTracker, message_key
from aqueduct.wire.frames import (
    AttachmentRef,
    CancelSender,
    FinishSender,
    SentUnreliable,
    encode_frame,
)
from aqueduct.wire.modes import Mode
from aqueduct.wire.rangeset import RangeSet, decode_ack_nack
from aqueduct.wire.varint import Headers, encode_varint


class SenderState(Enum):
    OPEN = "open"
    FINISHING = "finishing"
    FINISHED = "finished"
    CANCELLED = "cancelled"


# Hot-path aliases: on CPython 3.11 reading an Enum member off its class runs
# a Python-level descriptor (over 100 ns); a module global costs a fraction.
_ORDERED, _UNRELIABLE, _OPEN = Mode.ORDERED, Mode.UNRELIABLE, SenderState.OPEN


@dataclass(frozen=True, slots=True)
class SenderConfig:
    """What a connection tells each sender it makes, and each live one when it changes.

    The bounds come from ``ProtoConfig`` (``max_queued``, ``max_queued_bytes``,
    ``max_open_streams``); the rest is what the connection learned:
    ``window`` is the peer's W0 (its ``aqueduct-window`` header; ours until
    it announced one), ``max_datagram_size`` what QUIC says fits a packet,
    and ``datagram_prefix`` what starts each datagram before its ROUTE_TO
    (VERSION, until the peer acked ours). Each changes at most once per
    connection, so pushing it to every live sender costs nothing per message.
    """

    window: int
    max_queued: int
    max_queued_bytes: int
    max_open_streams: int
    max_datagram_size: int
    datagram_prefix: bytes


@dataclass(slots=True)
class FeedbackTaken:
    """What a frame from the receiver (an ack, DEQUEUED, CLOSE_RECEIVER) did to the sender.

    ``events`` go to the application, in order; ``lost`` are the channels
    that messages it nacked or dropped carried (the connection's lifecycle
    decides what becomes of them).
    """

    events: list[Event]
    lost: list[int]


#: values of ``SenderChannel.report``: datagrams left that the connection must have reported
REPORT_LATER, REPORT_NOW = 1, 2


class _Queued:
    """A message the window did not admit yet."""

    __slots__ = ("headers", "attachments", "payload")

    def __init__(self, headers: Headers, attachments: tuple[AttachmentRef, ...], payload: bytes) -> None:
        self.headers = headers
        self.attachments = attachments
        self.payload = payload


def refuse_attachments_on_run(chanid: int, count: int) -> NoReturn:
    """Attachments travel in one message: a run of several (or none) cannot carry them."""
    raise LocalProtocolError(f"channel {chanid}: attachments go on a run of one message, not {count}")


class SenderChannel:
    """Sender state of ``chanid``; frames go out through the shared ``Output``."""

    is_sender = True

    def __init__(
        self, chanid: int, config: SenderConfig, out: Output, transit: TransitTracker, conn_stats: ConnectionStats
    ) -> None:
        self.chanid = chanid
        self.oneshot = bool(chanid & 4)
        self.mode = Mode.ORDERED
        self.state = SenderState.OPEN
        self.window = SendWindow(config.window)
        self.max_queued = config.max_queued
        self.max_queued_bytes = config.max_queued_bytes
        self.max_open_streams = config.max_open_streams
        self.max_datagram_size = config.max_datagram_size
        self.attached = False  # appeared in a MESSAGE we sent or received
        self.routed = False  # a ROUTE_TO for it went out or came in (FORGET rule)
        self.stats = ChannelStats()
        self._out = out
        self._transit = transit
        self._cstats = conn_stats
        self._route = route_to(chanid)
        self._dgram_head = config.datagram_prefix + self._route  # what starts each datagram
        #: 0, or datagrams went out since the last SENT_UNRELIABLE and the connection
        #: was not told yet: REPORT_LATER, or REPORT_NOW when one carried a handle
        #: (the connection takes it after every call that may send, ``take_report``)
        self.report = 0
        self.sent_reliable = 0
        self.sent_unreliable = 0
        self._unannounced = 0
        self._acked = RangeSet()  # reliable numbers acked so far
        self._u_cursor = 0  # end of what ACK_NACK_UNRELIABLE covered
        self._u_costs: deque[int] = deque()  # costs of unreliable numbers from the cursor
        #: messages the window did not admit yet, oldest first (empty: everything taken went out)
        self.queue: deque[_Queued] = deque()
        self._queued_bytes = 0  # payload bytes in the queue
        self._streams_unacked: set[int] = set()  # numbers sent on their own stream, not acked
        #: attachments of evicted messages not taken yet (``take_evicted``): channels to lose
        self.evicted: list[int] = []
        self._control: int | None = None
        self._ordered: int | None = None

    def reconfigure(self, config: SenderConfig) -> None:
        """The connection learned something every sender must know (see :class:`SenderConfig`)."""
        self.window.limit = config.window
        self.max_datagram_size = config.max_datagram_size
        self._dgram_head = config.datagram_prefix + self._route

    def take_report(self) -> bool:
        """Clear ``report`` for the connection, which notes the sender: whether the report is urgent."""
        urgent, self.report = self.report == REPORT_NOW, 0
        return urgent

    # ------------------------------------------------------------ streams

    def _open(self) -> int:
        self.routed = True
        return self._out.open(self.chanid)

    def _control_stream(self) -> int:
        if self._control is None:
            self._control = self._open()
        return self._control

    def echo(self) -> None:
        """Answer a remote-created channel's appearance with our ROUTE_TO (spec section 5)."""
        self._control_stream()

    def open_streams(self) -> list[int]:
        """Our streams without FIN yet: the ones a reset can still cut short.

        Streams that got their FIN (each UNORDERED message's, a finished
        control stream) are never reset: QUIC may already have delivered and
        discarded them, and their data is complete anyway.
        """
        return [sid for sid in (self._ordered, self._control) if sid is not None]

    # ------------------------------------------------------------ application side

    def set_mode(self, mode: Mode) -> None:
        if self.oneshot and mode is not Mode.ORDERED:
            raise LocalProtocolError(f"channel {self.chanid}: a oneshot sender has no modes")
        self.mode = mode

    def send(
        self, payloads: Sequence[bytes], headers: Headers = (), attachments: tuple[AttachmentRef, ...] = ()
    ) -> int:
        """Send or queue ``payloads`` as messages, in order: how many were taken.

        The one way messages enter a sender: a single message is the run of
        one. The first is always taken (sent, or queued behind the window;
        an UNRELIABLE queue evicts its oldest instead of growing past
        ``max_queued``); each next one only while the queue is not full, so
        fewer than all means ``blocked``: the caller waits for
        ``SendWindowOpened`` and sends the rest. ``headers`` go on every
        message of the run; ``attachments`` only on a run of one (a channel
        travels in one message).

        Plain ORDERED runs (no headers, no attachments, no frame log) take a
        fast step, ``_send_plain``, that does exactly what the general step
        does message by message (tested byte for byte) in one write and
        without the per-message checks and counters.
        """
        if self.state is not _OPEN:
            raise LocalProtocolError(f"channel {self.chanid}: send after {self.state.value}")
        n = len(payloads)
        if n != 1:
            return self._send_run(payloads, headers, attachments)
        # the run of one, the general step: checks once, no list, as cheap as a lone message
        if self.oneshot and (self.sent_reliable or self.queue):
            raise LocalProtocolError(f"channel {self.chanid}: a oneshot channel carries one message")
        payload = payloads[0]
        queue = self.queue
        if not queue and self._transmit(headers, attachments, payload):
            if self.oneshot:
                self.finish()
            return 1
        self.stats.window_stalls += 1  # it waits for the window (or the stream cap)
        self._cstats.window_stalls += 1
        if self.mode is _UNRELIABLE and len(queue) >= self.max_queued:  # full: evict the oldest
            dropped = queue.popleft()
            self._queued_bytes -= len(dropped.payload)
            self.stats.evicted += 1
            self._cstats.evicted += 1
            self.evicted.extend(a.chanid for a in dropped.attachments)
        queue.append(_Queued(headers, attachments, payload))
        self._queued_bytes += len(payload)
        if self.oneshot:
            self.state = SenderState.FINISHING
        return 1

    def _send_run(
        self, payloads: Sequence[bytes], headers: Headers, attachments: tuple[AttachmentRef, ...]
    ) -> int:
        """A run of several (or none): the fast step when plain ORDERED, else each as a run of one."""
        if attachments:
            refuse_attachments_on_run(self.chanid, len(payloads))
        if self.oneshot and payloads:
            raise LocalProtocolError(f"channel {self.chanid}: a oneshot channel carries one message")
        if self.mode is _ORDERED and not headers and self._out.log is None:
            return self._send_plain(payloads)
        count = 0
        for payload in payloads:
            if count and self.blocked:
                break
            self.send((payload,), headers)
            count += 1
        return count

    def _send_plain(self, payloads: Sequence[bytes]) -> int:
        """The fast step of ``send`` for plain ORDERED runs: what the general step does per message.

        The messages the window admits go out as one write (``_transmit_plain``),
        the next ones wait in the queue until it is full. It saves the
        per-message work of the general step: the checks, the stream lookup,
        a write and the statistics each. (Worth it from two messages on: a
        run of one takes the general step.)
        """
        count = 0
        if not self.queue:
            count = self._transmit_plain(payloads)
            if count == len(payloads):
                return count
        queue = self.queue
        stats, cstats = self.stats, self._cstats
        for payload in payloads[count:] if count else payloads:
            if count and self.blocked:
                break
            queue.append(_Queued((), (), payload))
            self._queued_bytes += len(payload)
            stats.window_stalls += 1
            cstats.window_stalls += 1
            count += 1
        return count

    def _transmit_plain(self, payloads: Sequence[bytes]) -> int:
        """The first of ``payloads`` the window admits, on the ordered stream in one write: how many."""
        window = self.window
        limit, outstanding = window.limit, window.outstanding
        first = num = self.sent_reliable
        chunks: list[bytes] = []
        total = 0
        for payload in payloads:
            n = len(payload)
            head = b"".join((b"\x04", encode_varint(num), b"\x00\x00", encode_varint(n)))
            cost = len(head) + n
            if outstanding and outstanding + cost > limit:
                break  # (SendWindow.admits)
            chunks.append(head)
            chunks.append(payload)
            outstanding += cost
            total += cost
            num += 1
        count = num - first
        if not count:
            return 0
        sid = self._ordered if self._ordered is not None else self._open()
        self._ordered = sid
        self._out.write_chunks(sid, chunks)
        self.sent_reliable = num
        window.outstanding = outstanding
        for stats in (self.stats, self._cstats):
            stats.messages_sent += count
            stats.bytes_sent += total
        return count

    @property
    def blocked(self) -> bool:
        """A reliable sender's queue is full: the runtime's ``send()`` should wait.

        Full by count or by bytes; a queue holding one message is never full
        by bytes, so a message bigger than the byte bound still gets through.
        """
        if self.mode is _UNRELIABLE:
            return False
        queue = self.queue
        return len(queue) >= self.max_queued or (
            len(queue) > 1 and self._queued_bytes >= self.max_queued_bytes
        )

    def take_evicted(self) -> list[int]:
        """Attachments of evicted messages (never sent, hence lost)."""
        lost, self.evicted = self.evicted, []
        return lost

    def finish(self) -> None:
        """FINISH_SENDER once the queue is empty."""
        if self.oneshot and self.state in (SenderState.FINISHING, SenderState.FINISHED):
            return  # a oneshot finishes with its message already
        if self.state is not SenderState.OPEN:
            raise LocalProtocolError(f"channel {self.chanid}: finish after {self.state.value}")
        if self.queue:
            self.state = SenderState.FINISHING
        else:
            self._send_finish()

    def cancel(self) -> list[int]:
        """CANCEL_SENDER and reset message streams; returns attachments lost with the queue."""
        if self.state in (SenderState.FINISHED, SenderState.CANCELLED):
            raise LocalProtocolError(f"channel {self.chanid}: cancel after {self.state.value}")
        lost = self._drop_queue()
        self.flush_announce()
        sid = self._control_stream()
        self._out.write_frame(sid, CancelSender(), b"\x07")
        self._out.finish(sid)
        self._control = None
        self._reset_message_streams(RESET_CANCELLED)
        self.state = SenderState.CANCELLED
        return lost

    # ------------------------------------------------------------ transmission

    def _transmit(self, headers: Headers, attachments: tuple[AttachmentRef, ...], payload: bytes) -> bool:
        """Put one message on the wire if the window (and, for its own stream, the cap) admits it.

        An UNRELIABLE message goes as a datagram, or on a stream of its own
        when the datagram would be too big; the window and the counters are
        updated once for either (inline: this runs per message).
        """
        n = len(payload)
        mode = self.mode
        window = self.window
        datagram = False
        if mode is _UNRELIABLE:
            num = self.sent_unreliable
            head = message_head(num, headers, attachments, n)
            cost = len(head) + n
            if not window.admits(cost):
                return False
            prefix = self._dgram_head
            datagram = len(prefix) + cost <= self.max_datagram_size
            if datagram:
                self._out.datagram(b"".join((prefix, head, payload)))
                self._cstats.datagrams_sent += 1
                self.sent_unreliable = num + 1
                if attachments:
                    self.report = REPORT_NOW
                elif not self._unannounced and not self.report:
                    self.report = REPORT_LATER
                self._unannounced += 1
                self._u_costs.append(cost)
        if not datagram:
            num = self.sent_reliable
            head = message_head(num, headers, attachments, n)
            cost = len(head) + n
            if window.outstanding and window.outstanding + cost > window.limit:
                return False  # (SendWindow.admits, inline on the hot path)
            if mode is _ORDERED:
                sid = self._ordered if self._ordered is not None else self._open()
                self._ordered = sid if not self.oneshot else None
                if self.oneshot:
                    self._control = sid
            else:
                unacked = self._streams_unacked
                if len(unacked) >= self.max_open_streams:
                    return False  # waits for acks of earlier per-message streams
                unacked.add(num)
                sid = self._open()
            if n > 4096:
                self._out.write(sid, head)
                self._out.write(sid, payload)  # kept apart: joined once, at transmit()
            else:
                self._out.write(sid, head + payload)
            if mode is not _ORDERED:
                self._out.finish(sid)
                if mode is _UNRELIABLE:  # counted once it leaves, not per attempt
                    self._cstats.fallback_streams += 1
            self.sent_reliable = num + 1
        window.outstanding += cost  # (SendWindow.sent, inline)
        stats = self.stats
        stats.messages_sent += 1
        stats.bytes_sent += cost
        stats = self._cstats
        stats.messages_sent += 1
        stats.bytes_sent += cost
        if attachments:
            key = message_key(num, datagram)
            self._transit.attached(self.chanid, key, tuple(a.chanid for a in attachments))
        if self._out.log is not None:
            self._log_message("datagram" if datagram else f"stream {sid}", num, headers, attachments, n)
        return True

    def _log_message(
        self, where: str, num: int, headers: Headers, attachments: tuple[AttachmentRef, ...], n: int
    ) -> None:
        self._out.log(
            {
                "direction": "sent",
                "where": where,
                "frame": "MESSAGE",
                "chanid": self.chanid,
                "num": num,
                "headers": repr(headers),
                "attachments": [a.chanid for a in attachments],
                "payload_len": n,
            }
        )

    def drain(self) -> SendWindowOpened | None:
        """Send queued messages the window now admits; finish if that was waited for.

        Returns ``SendWindowOpened`` when the queue drained, or is no longer full.
        """
        queue = self.queue
        if not queue:
            return None
        was_blocked = self.blocked
        while queue:
            item = queue[0]
            if not self._transmit(item.headers, item.attachments, item.payload):
                break
            queue.popleft()
            self._queued_bytes -= len(item.payload)
        if not queue:
            if self.state is SenderState.FINISHING:
                self.state = SenderState.OPEN
                self.finish()
            return SendWindowOpened(self.chanid)
        if was_blocked and not self.blocked:
            return SendWindowOpened(self.chanid)  # a blocked send() may continue
        return None

    def flush_announce(self) -> None:
        """SENT_UNRELIABLE for the datagrams sent since the last report."""
        if self._unannounced:
            frame = SentUnreliable(self._unannounced)
            self._out.write_frame(self._control_stream(), frame, encode_frame(frame))
            self._unannounced = 0

    def _send_finish(self) -> None:
        self.flush_announce()
        frame = FinishSender(self.sent_reliable)
        sid = self._control_stream()
        self._out.write_frame(sid, frame, encode_frame(frame))
        self._out.finish(sid)
        if self._ordered is not None and self._ordered != sid:
            self._out.finish(self._ordered)
        self._ordered = self._control = None
        self.state = SenderState.FINISHED

    def _drop_queue(self) -> list[int]:
        lost = self.take_evicted()
        for item in self.queue:
            lost.extend(a.chanid for a in item.attachments)
        self.queue.clear()
        self._queued_bytes = 0
        return lost

    def _reset_message_streams(self, code: int) -> None:
        if self._ordered is not None and self._ordered != self._control:
            self._out.reset(self._ordered, code)
        self._ordered = None

    def destroy(self, code: int) -> list[int]:
        """Lost or forgotten: reset every stream, abandon sends; returns never-sent attachments."""
        lost = self._drop_queue()
        for sid in self.open_streams():
            self._out.reset(sid, code)
        self._ordered = self._control = None
        return lost

    # ------------------------------------------------------------ frames from the receiver

    def on_ack_reliable(self, ranges: tuple[int, ...]) -> FeedbackTaken:
        """ACK_RELIABLE: values are relative to the lowest number not yet acked."""
        acked = RangeSet.from_ack_reliable(self._acked.base, ranges)
        top = 0
        for _, stop in acked:
            top = stop
        if top > self.sent_reliable:
            raise RemoteProtocolError(
                f"ACK_RELIABLE: acks message {top - 1} of channel {self.chanid}, "
                f"but only {self.sent_reliable} reliable messages were sent"
            )
        count = 0
        for start, stop in acked:
            self._acked.add_range(start, stop)
            count += stop - start
        if self._transit.has_unacked(self.chanid):
            for key in self._transit.unacked_keys(self.chanid):
                if not key & 1 and (key >> 1) in acked:
                    self._transit.acked(self.chanid, key)
        events: list[Event] = [self._acks_counted(count, 0)]
        if self._streams_unacked:
            self._streams_unacked = {n for n in self._streams_unacked if n not in acked}
            opened = self.drain()  # room for queued per-message streams
            if opened is not None:
                events.append(opened)
        return FeedbackTaken(events, [])

    def on_ack_nack(self, ranges: tuple[int, ...]) -> FeedbackTaken:
        """ACK_NACK_UNRELIABLE: covers numbers from our copy of the receiver's cursor."""
        acked, nacked, cursor = decode_ack_nack(self._u_cursor, ranges)
        if cursor > self.sent_unreliable:
            raise RemoteProtocolError(
                f"ACK_NACK_UNRELIABLE: covers unreliable message {cursor - 1} of channel "
                f"{self.chanid}, but only {self.sent_unreliable} were sent"
            )
        costs = self._u_costs
        lost: list[int] = []
        tracked = self._transit.has_unacked(self.chanid)
        n_ack = n_nack = 0
        released = 0
        # acked and nacked runs alternate from the cursor: walk them in order
        for r in sorted(acked + nacked, key=lambda r: r.start):
            is_nack = r in nacked
            for num in r:
                cost = costs.popleft()
                if is_nack:
                    released += cost
                if tracked:
                    key = message_key(num, True)
                    if is_nack:
                        lost.extend(self._transit.nacked(self.chanid, key))
                    else:
                        self._transit.acked(self.chanid, key)
            if is_nack:
                n_nack += len(r)
            else:
                n_ack += len(r)
        self._u_cursor = cursor
        if released:
            self.window.released(released)
        events: list[Event] = [self._acks_counted(n_ack, n_nack)]
        opened = self.drain()
        if opened is not None:
            events.append(opened)
        return FeedbackTaken(events, lost)

    def _acks_counted(self, acked: int, nacked: int) -> MessagesAcked:
        self.stats.acked += acked
        self.stats.nacked += nacked
        self._cstats.acked += acked
        self._cstats.nacked += nacked
        return MessagesAcked(self.chanid, acked, nacked)

    def on_dequeued(self, nbytes: int) -> FeedbackTaken:
        """DEQUEUED: credit returns to the window."""
        if not self.window.released(nbytes):
            raise RemoteProtocolError(
                f"DEQUEUED: {nbytes} bytes reported on channel {self.chanid}, "
                "more than were outstanding"
            )
        opened = self.drain()
        return FeedbackTaken([] if opened is None else [opened], [])

    def on_close_receiver(self) -> FeedbackTaken:
        """CLOSE_RECEIVER nacks every number not acked: the chanids that became lost with them."""
        lost = self._drop_queue()
        for key in self._transit.unacked_keys(self.chanid):
            lost.extend(self._transit.nacked(self.chanid, key))
        events: list[Event] = []
        if self.state is SenderState.FINISHED:
            events.append(ChannelFinished(self.chanid))
        elif self.state is not SenderState.CANCELLED:
            for sid in self.open_streams():
                self._out.reset(sid, RESET_CANCELLED)
            events.append(ReceiverWasClosed(self.chanid))
        self._ordered = self._control = None
        return FeedbackTaken(events, lost)
