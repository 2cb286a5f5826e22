"""How channels end, and what their ending takes along (spec sections 5 and 6).

A channel travels attached to a message; when that message is nacked, or
its receiver closes without dequeuing it, or the peer FORGETs a channel,
the attached channels (and theirs, transitively) are lost: destroyed here,
FORGET_CHANNEL sent for the routed ones we created. Attachments are checked
on the way out (only channels this side created, never attached before) and
on the way in (the peer's, new, and created unless they were forgotten
already). Channels that end normally are freed and tombstoned in the
:class:`~.channels.ChannelTable`.

Every method returns what happened (the channels lost, the channels to
create) and the connection acts on it: it builds channel states, counts
losses and tells the application (``ChannelLost``), so this room needs no
callback and no event queue.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aqueduct.proto.channels import ChannelTable
from aqueduct.proto.errors import LocalProtocolError, RemoteProtocolError
from aqueduct.proto.events import Attachment
from aqueduct.proto.output import RESET_LOST, Output
from aqueduct.proto.parking import Parking
from aqueduct.proto.receiver import ReceiverChannel
from aqueduct.proto.sender import SenderChannel, SenderState
from aqueduct.proto.transit import TransitTracker
from aqueduct.wire.chanid import ENTRYPOINT, Side, chanid_creator
from aqueduct.wire.frames import AttachmentRef, ForgetChannel, MessageFrame

_FORGET = b"\x0b"


@dataclass(slots=True)
class AttachmentsAccepted:
    """A received MESSAGE's attachments, checked (spec section 6).

    ``created``: channels new to this side, for the connection to create
    (in order, before the message is delivered). ``lost``: channels
    forgotten before their handle arrived, whose ``ChannelLost`` follows the
    message's ``MessagesReceived``.
    """

    attachments: tuple[Attachment, ...]
    created: list[int]
    lost: list[int]


class ChannelLifecycle:
    """Attachment accounting and loss propagation for one connection's channels."""

    def __init__(
        self, side: Side, table: ChannelTable, transit: TransitTracker, parking: Parking, out: Output
    ) -> None:
        self.side = side
        self.peer = Side.SERVER if side is Side.CLIENT else Side.CLIENT
        self._table = table
        self._channels = table.live
        self._transit = transit
        self._parking = parking
        self._out = out

    def cancel(self, ch: SenderChannel) -> list[int]:
        """CANCEL_SENDER on ``ch``; returns the channels lost with what it held attached."""
        lost = ch.cancel()
        return self.lose(lost) if lost else []

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

    def accept_attachments(self, msg: MessageFrame) -> AttachmentsAccepted:
        """Check a received MESSAGE's attachments (spec section 6): which to create, which are lost."""
        out = []
        created: list[int] = []
        lost: list[int] = []
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
            if ch is not None:
                ch.attached = True
            elif c not in self._parking:
                if c in self._table.destroyed:
                    lost.append(c)  # forgotten before its handle arrived
                else:
                    created.append(c)
            out.append(Attachment(c, att.headers))
        return AttachmentsAccepted(tuple(out), created, lost)

    def close_receiver(self, ch: ReceiverChannel, now: float, *, hold: bool = True) -> list[int] | None:
        """CLOSE_RECEIVER now, or None while ``hold`` lets it wait for announcements.

        Returns the channels the close lost (see ``_drop_orphans``). Only the
        application's own close waits (``ReceiverChannel.hold_close``);
        CANCEL_SENDER and the ends of channels nobody read close at once.
        """
        if hold and ch.hold_close(now):
            return None
        acked_orphans, nacked_orphans = ch.close(now)
        self.free(ch.chanid)
        return self._drop_orphans(acked_orphans, nacked_orphans, now)

    def _drop_orphans(self, acked: list[int], nacked: list[int], now: float) -> list[int]:
        """Channels attached to messages the application will never dequeue.

        Those whose message was acked are accessible to the peer, so we end
        them as the application would have (close a receiver, cancel a
        sender); returns the channels that ending lost. Those whose message
        the close nacks are lost for the peer: we drop them silently, with
        everything queued on them.
        """
        lost: list[int] = []
        for c in acked:
            ch = self._channels.get(c)
            if ch is None:
                continue
            if ch.is_sender:
                if ch.state in (SenderState.OPEN, SenderState.FINISHING):
                    lost += self.cancel(ch)
            else:
                lost += self.close_receiver(ch, now, hold=False) or ()  # nothing of it was read
        stack = list(nacked)
        while stack:
            ch = self._table.pop(stack.pop())
            if ch is None:
                continue
            if not ch.is_sender:
                stack.extend(ch.undequeued_attachments())
            ch.destroy(RESET_LOST)
            self._table.destroyed.add(ch.chanid)
        return lost

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

    def forget(self, chanid: int) -> tuple[bool, list[int]]:
        """FORGET_CHANNEL: destroy the state (overrides every other rule) and lose its children.

        Returns whether the channel still had state, and the channels we
        created that were lost with it.
        """
        ch = self._table.pop(chanid)
        self._table.destroyed.add(chanid)
        lost = self._transit.lose(chanid)[1:]
        if ch is not None:
            lost += ch.destroy(RESET_LOST)
        return ch is not None, self.lose(lost)

    def lose(self, roots: list[int]) -> list[int]:
        """Channels we created became lost: destroy, FORGET if routed; returns every one lost, in order.

        Those whose state already ended are returned too: their handles
        still learn the loss.
        """
        out: list[int] = []
        stack = list(roots)
        while stack:
            c = stack.pop()
            for chanid in self._transit.lose(c):
                ch = self._table.pop(chanid)
                if ch is not None:
                    stack.extend(ch.destroy(RESET_LOST))
                    if ch.routed:
                        self.send_forget(chanid)
                out.append(chanid)
        return out
