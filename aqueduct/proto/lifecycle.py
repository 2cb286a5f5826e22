"""How channels end, and what their ending takes along (spec sections 5 and 6).

A channel travels attached to a message; when that message is nacked, or
its receiver closes without dequeuing it, or the peer FORGETs a channel,
the attached channels (and theirs, transitively) are lost: destroyed here,
FORGET_CHANNEL sent for the routed ones we created, ``ChannelLost`` for the
application. Attachments are checked on the way out (only channels this side
created, never attached before) and on the way in (the peer's, new, and
created here unless they were forgotten already). Channels that end
normally are freed and tombstoned in the :class:`~.channels.ChannelTable`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from aqueduct.proto.channels import ChannelTable
from aqueduct.proto.errors import LocalProtocolError, RemoteProtocolError
from aqueduct.proto.events import Attachment, ChannelLost, Event
from aqueduct.proto.output import RESET_LOST, Output
from aqueduct.proto.parking import Parking
from aqueduct.proto.queue import EventQueue
from aqueduct.proto.receiver import ReceiverChannel
from aqueduct.proto.sender import SenderChannel, SenderState
from aqueduct.proto.stats import ConnectionStats
from aqueduct.proto.transit import TransitTracker
from aqueduct.wire.chanid import ENTRYPOINT, Side, chanid_creator
from aqueduct.wire.frames import AttachmentRef, ForgetChannel, Message

if TYPE_CHECKING:
    Channel = SenderChannel | ReceiverChannel

_FORGET = b"\x0b"


class ChannelLifecycle:
    """Attachment accounting and loss propagation for one connection's channels."""

    def __init__(
        self,
        side: Side,
        table: ChannelTable,
        transit: TransitTracker,
        parking: Parking,
        events: EventQueue,
        out: Output,
        stats: ConnectionStats,
        new_state: Callable[[int], Channel],
    ) -> None:
        self.side = side
        self.peer = Side.SERVER if side is Side.CLIENT else Side.CLIENT
        self._table = table
        self._channels = table.live
        self._transit = transit
        self._parking = parking
        self._events = events
        self._emit = parking.emit
        self._out = out
        self._stats = stats
        self._new_state = new_state

    def cancel(self, ch: SenderChannel) -> None:
        """CANCEL_SENDER on ``ch``; what it held attached is lost."""
        lost = ch.cancel()
        if lost:
            self.lose(lost)

    def attach(self, parent: int, attachments: Iterable) -> tuple[AttachmentRef, ...]:
        """Validate local attachments: channels we created, never attached before."""
        refs = []
        for att in attachments:
            if isinstance(att, int):
                c, headers = att, ()
            else:
                c, headers = att.chanid, att.headers
            ch = self._channels.get(c)
            if chanid_creator(c) != self.side or ch is None or c == parent:
                raise LocalProtocolError(
                    f"attachment {c}: only channels this side created with new_channel() "
                    "and that are still open can be attached"
                )
            if ch.attached:
                raise LocalProtocolError(f"attachment {c}: a channel can be attached only once")
            refs.append(AttachmentRef(c, tuple(headers)))
        for ref in refs:
            self._channels[ref.chanid].attached = True
        return tuple(refs)

    def accept_attachments(self, msg: Message) -> tuple[tuple[Attachment, ...], list[Event]]:
        """Check a received MESSAGE's attachments (spec section 6) and create their channels.

        Returns the attachments and events to emit right after this message's
        ``MessageReceived`` (``ChannelLost`` for a channel forgotten before its
        handle arrived).
        """
        out = []
        lost: list[Event] = []
        seen = set()
        for att in msg.attachments:
            c = att.chanid
            if chanid_creator(c) != self.peer:
                raise RemoteProtocolError(
                    f"MESSAGE: attachment {c} has CREATOR {chanid_creator(c).name.lower()}, "
                    f"but the frame's sender is the {self.peer.name.lower()}"
                )
            ch = self._channels.get(c)
            if c == ENTRYPOINT or c in seen or (ch is not None and ch.attached):
                raise RemoteProtocolError(f"MESSAGE: attachment {c} is an existing channel")
            seen.add(c)
            if ch is None and c not in self._parking:
                if c in self._table.destroyed:
                    lost.append(ChannelLost(c))  # forgotten before its handle arrived
                else:
                    ch = self._table.add(self._new_state(c))
                    ch.echo()
            if ch is not None:
                ch.attached = True
            out.append(Attachment(c, att.headers))
        return tuple(out), lost

    def close_receiver(self, ch: ReceiverChannel, now: float, *, hold: bool = True) -> bool:
        """CLOSE_RECEIVER now (True), or later while ``hold`` lets it wait for announcements (False).

        Only the application's own close waits (``ReceiverChannel.hold_close``);
        CANCEL_SENDER and the ends of channels nobody read close at once.
        """
        if hold and ch.hold_close(now):
            return False
        acked_orphans, nacked_orphans = ch.close(now)
        self.free(ch.chanid)
        self._drop_orphans(acked_orphans, nacked_orphans, now)
        return True

    def _drop_orphans(self, acked: list[int], nacked: list[int], now: float) -> None:
        """Channels attached to messages the application will never dequeue.

        Those whose message was acked are accessible to the peer, so we end
        them as the application would have (close a receiver, cancel a
        sender). Those whose message the close nacks are lost for the peer:
        we drop them silently, with everything queued on them.
        """
        for c in acked:
            ch = self._channels.get(c)
            if ch is None:
                continue
            if ch.is_sender:
                if ch.state in (SenderState.OPEN, SenderState.FINISHING):
                    self.cancel(ch)
            else:
                self.close_receiver(ch, now, hold=False)  # nothing of it was read
        stack = list(nacked)
        while stack:
            ch = self._table.pop(stack.pop())
            if ch is None:
                continue
            if not ch.is_sender:
                stack.extend(ch.undequeued_attachments())
            ch.destroy(RESET_LOST)
            self._table.destroyed.add(ch.chanid)

    def free(self, chanid: int) -> None:
        """A channel ended normally: drop its state, remember it is gone."""
        if self._table.pop(chanid) is not None:
            self._parking.ended(chanid)
            self._table.ended(chanid)
        self._transit.freed(chanid)

    def send_forget(self, chanid: int) -> None:
        sid = self._out.open(chanid)
        self._out.write_frame(sid, ForgetChannel(), _FORGET)
        self._out.finish(sid)

    def forget(self, chanid: int) -> None:
        """FORGET_CHANNEL: destroy the state (overrides every other rule) and lose its children."""
        ch = self._table.pop(chanid)
        self._table.destroyed.add(chanid)
        lost = self._transit.lose(chanid)[1:]
        if ch is not None:
            lost += ch.destroy(RESET_LOST)
            self._stats.channels_lost += 1
        if not self._parking.forgotten(chanid) and ch is not None:
            self._emit(ChannelLost(chanid))
        self.lose(lost)

    def lose(self, roots: list[int]) -> None:
        """Channels we created became lost: destroy, FORGET if routed, tell the application."""
        stack = list(roots)
        while stack:
            c = stack.pop()
            for chanid in self._transit.lose(c):
                ch = self._table.pop(chanid)
                if ch is not None:  # else it already ended; its handles still learn the loss
                    stack.extend(ch.destroy(RESET_LOST))
                    if ch.routed:
                        self.send_forget(chanid)
                self._stats.channels_lost += 1
                self._events.append(ChannelLost(chanid))

