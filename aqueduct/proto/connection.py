"""One Aqueduct connection, sans-IO: routing frames to channels, and the application's calls.

The runtime feeds transport input (``receive_stream_data``, ``receive_datagram``,
...) and application requests (``send``, ``finish``, ...), then drains
``transmit()`` (actions for QUIC) and ``next_event()`` (news for the
application). Nothing here reads a clock: every call that may start a timer
takes ``now``; ``get_timer()`` says when ``handle_timer`` wants to run.

This module routes; every other job has a room: transport input is
decoded in ``intake.py``, which returns what it decoded for this module to
route, ids / lookup / tombstones are
``channels.py``, attachments and loss propagation ``lifecycle.py``, the
SENT_UNRELIABLE reports ``announce.py``, the event queue ``queue.py``; the
per-channel rules live in ``sender.py`` and ``receiver.py``, accessibility
in ``transit.py``, the window in ``flow.py``, the prefix in
``handshake.py`` and batching in ``output.py``. A rule broken
by the peer raises ``RemoteProtocolError`` anywhere below; the public entry
points turn it into a close with code 1 (spec section 6).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from aqueduct._moved import moved_name
from aqueduct.proto.announce import ANNOUNCE_TIMER, Announcements
from aqueduct.proto.channels import ChannelTable
from aqueduct.proto.config import ProtoConfig, peer_window
from aqueduct.proto.errors import LocalProtocolError, RemoteProtocolError
from aqueduct.proto.events import (
    Action,
    Attachment,
    ChannelCancelled,
    ChannelFinished,
    ChannelLost,
    ConnectionTerminated,
    Event,
    HandshakeCompleted,
    MessagesReceived,
)
from aqueduct.proto.flow import message_cost
from aqueduct.proto.handshake import Handshake
from aqueduct.proto.intake import (
    DatagramReceived,
    Decoded,
    FramesRouted,
    Intake,
    PlainRunAccepted,
    RouteToReceived,
)
from aqueduct.proto.lifecycle import ChannelLifecycle
from aqueduct.proto.output import Output
from aqueduct.proto.parking import Parking
from aqueduct.proto.queue import EventQueue
from aqueduct.proto.receiver import ReceiverChannel
from aqueduct.proto.sender import (
    FeedbackTaken,
    SenderChannel,
    SenderConfig,
    refuse_attachments_on_run,
)
from aqueduct.proto.stats import ChannelStats, ConnectionStats
from aqueduct.proto.timers import Timers
from aqueduct.proto.transit import TransitTracker, message_key
from aqueduct.wire.chanid import (
    ENTRYPOINT,
    Side,
    chanid_creator,
    chanid_sender,
)
from aqueduct.wire.errors import WireError
from aqueduct.wire.frames import (
    AckNackUnreliable,
    AckReliable,
    AckVersion,
    AttachmentRef,
    CancelSender,
    CloseReceiver,
    ConnectionHeaders,
    Dequeued,
    FinishSender,
    ForgetChannel,
    Frame,
    MessageFrame,
    SentUnreliable,
    Version,
)
from aqueduct.wire.modes import Mode
from aqueduct.wire.varint import Headers

__all__ = ["ConnectionMachine", "Mode"]

Channel = SenderChannel | ReceiverChannel

# who may send each routed frame (spec section 3): the sender side, the receiver side, the creator
_FROM_SENDER, _FROM_RECEIVER, _FROM_CREATOR = "s->r", "r->s", "creator"
_SIDE_RULE: dict[type, str] = {
    **dict.fromkeys((MessageFrame, SentUnreliable, FinishSender, CancelSender), _FROM_SENDER),
    **dict.fromkeys((AckReliable, AckNackUnreliable, CloseReceiver, Dequeued), _FROM_RECEIVER),
    ForgetChannel: _FROM_CREATOR,
}


class ConnectionMachine:
    """The Aqueduct state machines of one connection (client or server side)."""

    def __init__(self, is_client: bool, config: ProtoConfig | None = None) -> None:
        self.config = config = config or ProtoConfig()
        self.is_client = is_client
        self.side = Side.CLIENT if is_client else Side.SERVER
        self.peer = Side.SERVER if is_client else Side.CLIENT
        self._hs = Handshake(config.headers_to_send())
        self._out = Output(is_client, self._hs.prefix, config.frame_log)
        self._log = config.frame_log
        self._events = EventQueue()
        # events of channels whose handle has not reached the application yet
        self._parking = Parking(self._events)
        self._emit = self._parking.emit
        self._stats = ConnectionStats()
        self._transit = TransitTracker()
        self._timers = Timers()
        self._table = ChannelTable(self.side)
        self._channels = self._table.live  # lookups go straight to the dict (hot path)
        self._announce = Announcements(self._timers, config.announce_delay)
        #: what each new sender is told (the window is ours until the peer announces its own)
        self._sender_config = SenderConfig(
            config.window,
            config.max_queued,
            config.max_queued_bytes,
            config.max_open_streams,
            config.max_datagram_size,
            self._hs.datagram_prefix(),
        )
        self._rtt: float | None = None
        self._terminated = False
        self._intake = Intake(self.side, config, self._hs, self._table, self._stats)
        self._lifecycle = ChannelLifecycle(self.side, self._table, self._transit, self._parking, self._out)
        if is_client:
            self._table.reserve(ENTRYPOINT)
        self._table.add(self._new_state(ENTRYPOINT))

    # ================================================================ inspection

    @property
    def channels(self) -> Mapping[int, Channel]:
        """Read-only view of live channel states (tests assert it empties)."""
        return self._table.view()

    def channel_count(self) -> int:
        return len(self._table)

    def tracking_count(self) -> int:
        """Channels whose accessibility is still being tracked."""
        return len(self._transit)

    def stats(self) -> ConnectionStats:
        return replace(self._stats, streams_opened=self._out.streams_opened)

    def channel_stats(self, chanid: int) -> ChannelStats:
        ch = self._channels.get(chanid)
        if ch is None:
            raise LocalProtocolError(f"channel {chanid}: no such channel")
        return replace(ch.stats)

    @property
    def terminated(self) -> bool:
        return self._terminated

    @property
    def peer_headers(self) -> Headers | None:
        return self._hs.peer_headers

    # ================================================================ outputs

    def transmit(self) -> list[Action]:
        """Actions to perform on QUIC, one ``StreamDataQueued`` per stream."""
        if self._announce.due:
            for chanid in self._announce.take_due():
                ch = self._channels.get(chanid)
                if ch is not None and ch.is_sender:
                    ch.flush_announce()
        if self._hs.owes_prefix and not self._terminated:
            self._out.finish(self._out.open())
        return self._out.drain()

    @property
    def quiet(self) -> bool:
        """No action for ``transmit`` and no event for ``next_event``: a driver may skip both.

        A cheap check for the runtime, which flushes after every UDP datagram
        even when that datagram (a bare QUIC ACK, say) changed nothing here.
        """
        return not (self._events or self._announce.due or self._out.pending or self._hs.owes_prefix)

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    def get_timer(self) -> float | None:
        return None if self._terminated else self._timers.next()

    # ================================================================ transport input

    def initiate(self, now: float) -> None:
        """Client: send VERSION and CONNECTION_HEADERS first thing."""
        if not self.is_client:
            raise LocalProtocolError("initiate: only the client starts the handshake")
        self._hs.send_headers()

    def set_rtt(self, seconds: float) -> None:
        self._rtt = seconds

    def set_max_datagram_size(self, n: int) -> None:
        self._senders_reconfigured(max_datagram_size=n)

    def receipt_deadline(self) -> float:
        """max(2 x RTT, 100 ms); 1 s before an RTT sample exists."""
        if self._rtt is None:
            return self.config.initial_receipt_deadline
        return max(2 * self._rtt, self.config.min_receipt_deadline)

    def receive_stream_data(self, stream_id: int, data: bytes, end_stream: bool, now: float) -> None:
        """Bytes of an incoming QUIC stream, decoded by the intake and routed here."""
        if self._terminated:
            return
        try:
            self._take(self._intake.stream_data(stream_id, data, end_stream, now), now)
        except (RemoteProtocolError, WireError) as e:
            self._violation(str(e))

    def receive_stream_reset(self, stream_id: int, code: int, now: float) -> None:
        """A reset incoming stream: a partial frame is dropped, whole frames stay processed."""
        self._intake.stream_reset(stream_id)

    def receive_datagram(self, data: bytes, now: float) -> None:
        """One QUIC DATAGRAM: a batch of one (see ``receive_datagrams``)."""
        self.receive_datagrams((data,), now)

    def receive_datagrams(self, datas: Iterable[bytes], now: float) -> None:
        """QUIC DATAGRAMs read together, in order (see :meth:`.intake.Intake.datagrams`)."""
        if self._terminated:
            return
        try:
            self._take(self._intake.datagrams(datas, now), now)
        except (RemoteProtocolError, WireError) as e:
            self._violation(str(e))

    def handle_timer(self, now: float) -> None:
        if self._terminated:
            return
        try:
            for chanid in self._timers.pop_due(now):
                if chanid == ANNOUNCE_TIMER:
                    self._announce.due = True
                    continue
                ch = self._channels.get(chanid)
                if ch is None or ch.is_sender:
                    continue
                ch.on_timer(now)
                self._after_receive(ch, now)
        except (RemoteProtocolError, WireError) as e:
            self._violation(str(e))

    # ================================================================ application input

    def new_channel(self, sender_side: Side, oneshot: bool = False) -> int:
        """Allocate a chanid we create (sent in a MESSAGE later) and its local state."""
        chanid = self._table.allocate(sender_side, oneshot)
        self._table.add(self._new_state(chanid))
        self._transit.created(chanid)
        return chanid

    def send(
        self,
        chanid: int,
        payloads: Sequence[bytes],
        headers: Headers = (),
        attachments: Iterable[Attachment | AttachmentRef | int] = (),
        now: float = 0.0,
    ) -> tuple[int, bool]:
        """Send ``payloads`` on sender ``chanid``, in order: how many were taken, and whether all left.

        The one way the application's messages enter the core; a single
        message is the run of one. ``headers`` go on every message,
        ``attachments`` only on a run of one. The first message is always
        taken (sent, or queued); the next ones only while the local queue is
        not full (see ``SenderChannel.send``).

        The second answer is True when nothing waits in the sender's queue
        after the call: the sender has room, and nothing was evicted. When
        False, the runtime delivers the pending events first (an UNRELIABLE
        queue's eviction may have lost the channels a message carried), then
        asks ``send_blocked(chanid)`` whether its ``send()`` must wait for
        ``SendWindowOpened``. Both answers come from the one call because
        the runtime needs the first two after every send, and a second call
        into the core costs about a fifth of a send.
        """
        ch = self._sender(chanid)
        if not ch.attached and chanid != ENTRYPOINT:  # (the common cases skip the call)
            self._check_networked(ch)
        if attachments:
            if len(payloads) != 1:  # (checked before attaching, which cannot be undone)
                refuse_attachments_on_run(chanid, len(payloads))
            refs = self._lifecycle.attach(chanid, attachments)
        else:
            refs = ()
        taken = ch.send(payloads, headers, refs)
        if ch.report:  # (set by the first datagram a report covers, or one carrying a handle)
            self._report_datagrams(ch, now)
        settled = not ch.queue
        if not settled and ch.evicted:  # (only a queued message evicts)
            self._channels_lost(self._lifecycle.lose(ch.take_evicted()))
        return taken, settled

    def send_blocked(self, chanid: int) -> bool:
        """The sender's local queue is full: ``send()`` should wait for ``SendWindowOpened``."""
        return self._sender(chanid).blocked

    def set_mode(self, chanid: int, mode: Mode) -> None:
        self._sender(chanid).set_mode(mode)

    def finish(self, chanid: int, now: float) -> None:
        ch = self._sender(chanid)
        self._check_networked(ch)
        ch.finish()

    def _check_networked(self, ch: SenderChannel) -> None:
        """A channel we created must be attached before anything is routed to it.

        Otherwise the peer would create state (from our ROUTE_TO) for a channel
        whose handle never arrives.
        """
        if not ch.attached and ch.chanid != ENTRYPOINT and chanid_creator(ch.chanid) == self.side:
            raise LocalProtocolError(
                f"channel {ch.chanid}: attach it to a message before sending on it or finishing it"
            )

    def cancel(self, chanid: int, now: float) -> None:
        """CANCEL_SENDER. A no-op if the channel (or the connection) already ended."""
        ch = self._channels.get(chanid)
        if ch is None or self._terminated:
            return
        if not ch.is_sender:
            raise LocalProtocolError(f"cancel: we hold the receiver of channel {chanid}, not the sender")
        self._channels_lost(self._lifecycle.cancel(ch))

    def close_receiver(self, chanid: int, now: float) -> None:
        """The application dropped its receiver: CLOSE_RECEIVER (nacks what is not acked).

        A no-op if the channel (or the connection) already ended.
        """
        ch = self._channels.get(chanid)
        if ch is None or self._terminated:
            return
        if ch.is_sender:
            raise LocalProtocolError(f"close_receiver: we hold the sender of channel {chanid}")
        lost = self._lifecycle.close_receiver(ch, now)
        if lost is None:
            self._timers.schedule(chanid, ch.next_deadline())  # held: the deadline closes it
        else:
            self._channels_lost(lost)

    def dequeued(self, chanid: int, nbytes: int, now: float) -> None:
        """The application consumed messages of ``nbytes`` (their ``MessagesReceived.costs``)."""
        ch = self._channels.get(chanid)
        if ch is None or ch.is_sender or self._terminated:
            return  # the channel ended meanwhile: nobody waits for credit
        ch.dequeued(nbytes, now)
        self._timers.schedule(chanid, ch.next_deadline())

    def close(self, now: float, reason: str = "") -> None:
        """Application close of the whole connection (code 2)."""
        if self._terminated:
            return
        self._terminated = True
        self._out.close(2, reason)
        self._events.append(ConnectionTerminated(2, reason, by_peer=False))

    # ================================================================ dispatch

    def _take(self, decoded: Iterator[Decoded], now: float) -> None:
        """Act on what the intake decoded, one result after the other (it decodes lazily).

        The order matters: the intake decodes the next result only after this
        acted on the one before (a ROUTE_TO's answer routes the frames
        behind it, CONNECTION_HEADERS releases held input).
        """
        routed = self._routed
        for result in decoded:
            kind = type(result)
            if kind is PlainRunAccepted:
                self._deliver_plain(result, now)
            elif kind is FramesRouted:
                chanid = result.chanid
                for frame in result.frames:
                    routed(chanid, frame, False, now)
            elif kind is DatagramReceived:
                chanid = self._route(result.chanid)
                if chanid is not None:
                    routed(chanid, result.frame, True, now)
            elif kind is RouteToReceived:
                result.stream.routed_to(self._route(result.chanid))
            else:
                self._prefix_frame(result.frame, now)

    def _prefix_frame(self, frame: Frame, now: float) -> None:
        hs = self._hs
        if isinstance(frame, Version):
            hs.version_received()
        elif isinstance(frame, AckVersion):
            hs.ack_version_received()
            self._senders_reconfigured(datagram_prefix=hs.datagram_prefix())
        elif isinstance(frame, ConnectionHeaders):
            hs.headers_received(frame.headers)
            window = peer_window(frame.headers)
            if window is not None:
                self._senders_reconfigured(window=window)
            if not self.is_client:
                hs.send_headers()
            self._events.append(HandshakeCompleted(frame.headers))
            self._take(self._intake.release_held(), now)

    def _route(self, chanid: int) -> int | None:
        """ROUTE_TO ``chanid``: the channel to route to, or None to ignore the sequence."""
        ch = self._channels.get(chanid)
        if ch is not None:
            ch.routed = True
            return chanid
        if chanid_creator(chanid) == self.peer:
            if chanid in self._table.destroyed:
                return chanid  # gone for good: frames are ignored (after the ending checks)
            # frames may beat the MESSAGE that attaches the channel: create it now
            ch = self._table.add(self._new_state(chanid))
            ch.routed = True
            ch.echo()
            self._parking.park(chanid)
            return chanid
        if chanid not in self._table.closed_locally:
            self._lifecycle.send_forget(chanid)
        return None

    def _routed(self, chanid: int, frame: Frame, unreliable: bool, now: float) -> None:
        """One routed frame for ``chanid``: check the side, then hand it to the channel."""
        if type(frame) is MessageFrame:  # the hot path, one per message
            if chanid_sender(chanid) == self.peer:  # we hold the receiver: the peer may send
                ch = self._channels.get(chanid)
                if ch is not None:
                    self._receive_message(ch, frame, unreliable, now)
                return
        rule = _SIDE_RULE[type(frame)]
        if rule is _FROM_SENDER:
            if chanid_sender(chanid) != self.peer:
                raise RemoteProtocolError(
                    f"{frame.NAME}: only the sender side may send it, and we hold the sender "
                    f"of channel {chanid}"
                )
        elif rule is _FROM_RECEIVER:
            if chanid_sender(chanid) == self.peer:
                raise RemoteProtocolError(
                    f"{frame.NAME}: only the receiver side may send it, and we hold the receiver "
                    f"of channel {chanid}"
                )
        else:
            if chanid_creator(chanid) != self.peer:
                raise RemoteProtocolError(
                    f"FORGET_CHANNEL: only the creator may send it, and we created channel {chanid}"
                )
            self._forget(chanid)
            return
        ch = self._channels.get(chanid)
        if ch is None:
            # ended while this sequence was in flight; only a sender's ending can be checked
            if isinstance(frame, (FinishSender, CancelSender, SentUnreliable)):
                if chanid in self._table.sender_ended:
                    raise RemoteProtocolError(
                        f"{frame.NAME}: channel {chanid} already got FINISH_SENDER or CANCEL_SENDER"
                    )
            return
        if ch.is_sender:
            self._sender_frame(ch, frame, now)
        else:
            self._receiver_frame(ch, frame, unreliable, now)

    def _sender_frame(self, ch: SenderChannel, frame: Frame, now: float) -> None:
        taken: FeedbackTaken
        if isinstance(frame, AckReliable):
            taken = ch.on_ack_reliable(frame.ranges)
        elif isinstance(frame, AckNackUnreliable):
            taken = ch.on_ack_nack(frame.ranges)
        elif isinstance(frame, Dequeued):
            taken = ch.on_dequeued(frame.num_bytes)
        else:  # CloseReceiver
            taken = ch.on_close_receiver()
        for event in taken.events:  # (before a CLOSE_RECEIVER frees the channel: parking knows it)
            self._emit(event)
        if type(frame) is CloseReceiver:
            self._lifecycle.free(ch.chanid)
        if taken.lost:
            self._channels_lost(self._lifecycle.lose(taken.lost))
        if ch.report:  # queued datagrams went out
            self._report_datagrams(ch, now)

    def _report_datagrams(self, ch: SenderChannel, now: float) -> None:
        """Datagrams of ``ch`` went out: a SENT_UNRELIABLE reports them within the announce delay.

        Only a call that sent a datagram gets here, so the send path pays
        nothing for it otherwise; a datagram carrying a handle is reported
        at the next transmit (see :mod:`.announce`).
        """
        announce = self._announce
        announce.note(ch.chanid, ch.take_report())
        if not announce.armed:
            announce.arm(now)

    def _receive_message(self, ch: ReceiverChannel, frame: MessageFrame, unreliable: bool, now: float) -> None:
        """One MESSAGE of the general path (headers, attachments, a datagram, a logged frame)."""
        fresh = ch.ack_due is None
        if unreliable:
            if not ch.accept_unreliable(frame.num, now):
                return  # late: it was nacked already
        else:
            ch.accept_reliable(frame.num, 1, now)
        cost = message_cost(frame)
        stats = self._stats
        stats.messages_received += 1
        stats.bytes_received += cost
        if frame.attachments:
            accepted = self._lifecycle.accept_attachments(frame)
            for c in accepted.created:
                child = self._table.add(self._new_state(c))
                child.echo()
                child.attached = True
            children = accepted.attachments
            ids = tuple(a.chanid for a in children)
            ch.delivered(1, cost, ids, message_key(frame.num, unreliable))
            self._emit(MessagesReceived(ch.chanid, [frame.payload], [cost], frame.headers, children))
            self._parking.adopt(ch.chanid, ids)
            for c in accepted.lost:
                self._emit(ChannelLost(c))
        else:
            ch.delivered(1, cost)
            self._emit(MessagesReceived(ch.chanid, [frame.payload], [cost], frame.headers))
        self._after_delivery(ch, fresh, now)

    def _after_delivery(self, ch: ReceiverChannel, fresh: bool, now: float) -> None:
        """After accepted messages: finish the channel or arm its timer (``fresh``: no ack was due)."""
        if ch.finish_total is not None:
            self._after_receive(ch, now)
        elif fresh:
            # The common case of _after_receive, inline. Only a newly set ack
            # deadline can move the channel's timer earlier; while one was
            # already set, its timer is armed (accept sets it, flush clears it).
            self._timers.schedule(ch.chanid, ch.next_deadline())

    def _deliver_plain(self, run: PlainRunAccepted, now: float) -> None:
        """Accepted plain messages go to the application as one ``MessagesReceived``.

        The event queue gathers consecutive runs of one channel (the
        datagrams or chunks of one read batch) into one event, queued whole
        (:mod:`.queue`); a parked channel's run is parked as it is.
        """
        ch, payloads, costs = run.channel, run.payloads, run.costs
        cost = sum(costs)
        stats = self._stats
        stats.messages_received += len(payloads)
        stats.bytes_received += cost
        ch.delivered(len(payloads), cost)
        self._emit(MessagesReceived(ch.chanid, payloads, costs))
        self._after_delivery(ch, run.fresh, now)

    def _receiver_frame(self, ch: ReceiverChannel, frame: Frame, unreliable: bool, now: float) -> None:
        if isinstance(frame, SentUnreliable):
            ch.on_sent_unreliable(frame.count, now)
        elif isinstance(frame, FinishSender):
            ch.on_finish(frame.sent_reliable)
            self._table.sender_ended.add(ch.chanid)
        else:  # CancelSender
            ch.on_cancel()
            self._table.sender_ended.add(ch.chanid)
            self._emit(ChannelCancelled(ch.chanid))
            self._channels_lost(self._lifecycle.close_receiver(ch, now, hold=False) or ())
            return
        self._after_receive(ch, now)

    def _after_receive(self, ch: ReceiverChannel, now: float) -> None:
        """Finish the channel if it is complete, else make sure its timer runs.

        A channel the application closed while datagrams were unannounced
        closes once they are announced (or its deadline passed) instead.
        """
        if ch.closing_deadline is not None:
            lost = self._lifecycle.close_receiver(ch, now)
            if lost is None:
                self._timers.schedule(ch.chanid, ch.next_deadline())
            else:
                self._channels_lost(lost)
            return
        if ch.finish_total is not None and ch.complete:
            ch.finish_close(now)
            self._emit(ChannelFinished(ch.chanid))
            self._lifecycle.free(ch.chanid)
        else:
            self._timers.schedule(ch.chanid, ch.next_deadline())

    # ================================================================ lifecycle

    def _channels_lost(self, lost: Iterable[int]) -> None:
        """Channels we created were lost (``ChannelLifecycle`` says which): count them, tell the application."""
        for chanid in lost:
            self._stats.channels_lost += 1
            self._events.append(ChannelLost(chanid))

    def _forget(self, chanid: int) -> None:
        """FORGET_CHANNEL from the creator: the channel and what it carried are lost.

        The channel's own ``ChannelLost`` is not due when its handle can never
        exist (``Parking.forgotten``), nor when its state had already ended.
        """
        had_state, lost = self._lifecycle.forget(chanid)
        if had_state:
            self._stats.channels_lost += 1
        if not self._parking.forgotten(chanid) and had_state:
            self._emit(ChannelLost(chanid))
        self._channels_lost(lost)

    def _new_state(self, chanid: int) -> Channel:
        cfg = self.config
        if chanid_sender(chanid) == self.side:
            return SenderChannel(chanid, self._sender_config, self._out, self._transit, self._stats)
        return ReceiverChannel(
            chanid,
            cfg.window,
            cfg.ack_delay,
            cfg.dequeued_delay,
            self.receipt_deadline,
            self._out,
            self._stats,
        )

    def _senders_reconfigured(self, **changes: Any) -> None:
        """What every sender is told changed: new senders start from it, live ones take it now."""
        self._sender_config = config = replace(self._sender_config, **changes)
        for ch in self._channels.values():
            if ch.is_sender:
                ch.reconfigure(config)

    def _sender(self, chanid: int) -> SenderChannel:
        if self._terminated:
            raise LocalProtocolError(f"channel {chanid}: the connection is closed")
        ch = self._channels.get(chanid)
        if ch is None or not ch.is_sender:
            raise LocalProtocolError(f"channel {chanid}: we hold no sender of it")
        return ch

    def _violation(self, reason: str) -> None:
        """The peer broke a rule: close with PROTOCOL_VIOLATION (code 1) at once."""
        if self._terminated:
            return
        self._terminated = True
        self._out.drain()
        self._out.close(1, reason)
        self._events.append(ConnectionTerminated(1, reason, by_peer=False))


def __getattr__(name: str) -> Any:
    """``Connection``, this class's name until it took one of its own: works, and warns."""
    if name == "Connection":
        return moved_name(__name__, name, __name__, "ConnectionMachine")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
