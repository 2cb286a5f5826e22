"""The link between one connection's core and its handles: :class:`HandleLink`.

A networked :class:`~aqueduct.runtime.handles.Sender` or ``Receiver`` talks
to its connection through the :class:`~aqueduct.runtime.handles.handle.Link`
protocol (send, finish, cancel, close, read progress ...), and the core's
channel events (a message arrived, the window opened, the channel ended)
must reach the handle of their channel. Both are this module's job, kept
apart from the :class:`~aqueduct.runtime.driver.core_driver.Driver`, which pumps QUIC:
it feeds the core the stack's input, applies the core's actions to the
stack, and runs the timers. The driver asks the link to deliver the core's
events after each flush; :meth:`HandleLink.deliver_events` returns the
connection-level ones (handshake done, connection ended) for the driver to
act on, so nothing here knows about QUIC, packets or timers. What the link
needs of its pump is three calls (:class:`Pump`): a flush soon, a flush now,
and the core's events delivered now.

Those three are the one place where the link calls its driver rather than
returning to it, and they cannot be results: the link's callers are the
handles, that is, the application's own code (a ``send``, a ``finish``, a
handle dropped), with no driver frame on the stack to return a result to.
The driver's own calls into the link (``deliver_events``,
``hand_over_dequeued``) do return what the driver must act on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections.abc import Sequence
from typing import Any, Protocol

from aqueduct.proto import events as ev
from aqueduct.proto.connection import ConnectionMachine
from aqueduct.proto.errors import (
    ConnectionLost,
    LocalProtocolError,
    LostInTransit,
    ReceiverClosed,
    RemoteProtocolError,
)
from aqueduct.runtime.driver.coalesce import SendCoalescer
from aqueduct.runtime.handles.delivery import Finished
from aqueduct.runtime.handles.handle import AttachmentOut, Message
from aqueduct.runtime.handles.headers import Headers, Middleware, run_middleware
from aqueduct.runtime.handles.pairs import networked_handle
from aqueduct.runtime.handles.payload import (
    CBOR,
    PayloadError,
    content_type,
    decode_value,
    plain_decoder,
)
from aqueduct.runtime.handles.receiver import Receiver
from aqueduct.runtime.handles.sender import Sender
from aqueduct.wire.chanid import ENTRYPOINT, Side, chanid_oneshot, chanid_sender
from aqueduct.wire.modes import Mode

PROTOCOL_VIOLATION = 1  # QUIC application error code (spec section 6)

#: Core events that concern the connection, not one handle: the pump acts on them.
ConnectionEvent = ev.HandshakeCompleted | ev.ConnectionTerminated


class Pump(Protocol):
    """What the link needs of the driver that moves its connection's bytes."""

    def transmit_soon(self) -> None:
        """One flush at the loop's next turn, however many calls ask for it."""

    def flush_core(self) -> None:
        """Hand the core's actions to the stack now, and send what that queued."""

    def dispatch_events(self) -> None:
        """Deliver the core's pending events now (the link's and the connection's)."""


class HandleLink:
    """The :class:`~aqueduct.runtime.handles.handle.Link` of one connection's networked handles."""

    def __init__(
        self,
        core: ConnectionMachine,
        pump: Pump,
        coalescer: SendCoalescer,
        *,
        side: Side,
        middleware: tuple[Middleware, ...] = (),
    ) -> None:
        self.core = core
        self._pump = pump
        self._coalescer = coalescer
        self._loop = asyncio.get_running_loop()
        self.side = side
        self.middleware = middleware
        self.peer_headers: Headers = ()
        self.peer_content_type = CBOR  # how to read the peer's messages without content-type
        self.content_type = content_type(core.config.headers)  # our announced default
        self.connection: Any = None  # the public Connection object, set by endpoints
        self.terminated: ConnectionLost | None = None
        # Weak: dropping a handle releases its channel (see ``dropped``).
        self._handles: weakref.WeakValueDictionary[int, Sender | Receiver] = weakref.WeakValueDictionary()
        self._entry: Sender | Receiver | None = None  # kept alive for the connection's lifetime
        self._dequeued: dict[int, int] = {}  # bytes the application consumed, not yet told

    # ------------------------------------------------------------ core events to handles
    def deliver_events(self) -> list[ConnectionEvent]:
        """Deliver the core's pending events to their handles; return the connection's own.

        The handshake's event opens the entrypoint here, before the messages
        that may follow it in the same batch; the connection's end ends every
        handle here. Both are also returned, in order, for the driver's part.
        """
        connection_events: list[ConnectionEvent] = []
        next_event = self.core.next_event
        event = next_event()
        while event is not None:
            if isinstance(event, ev.MessagesReceived):
                self._messages_received(event)
            elif isinstance(event, ev.SendWindowOpened):
                handle = self._handles.get(event.chanid)
                if isinstance(handle, Sender):
                    handle.gate.window_opened()
            elif isinstance(event, ev.MessagesAcked):
                pass  # counted by the core; visible through stats()
            elif isinstance(event, ev.ChannelFinished):
                handle = self._handles.pop(event.chanid, None)
                if isinstance(handle, Receiver):
                    handle.inbox.ended(Finished())
                elif isinstance(handle, Sender):
                    handle.gate.finish_confirmed()
            elif isinstance(event, ev.ChannelCancelled):
                handle = self._handles.pop(event.chanid, None)
                if isinstance(handle, Receiver):
                    handle.inbox.cancelled()
            elif isinstance(event, ev.ReceiverWasClosed):
                handle = self._handles.pop(event.chanid, None)
                if isinstance(handle, Sender):
                    handle.gate.failed(ReceiverClosed("the receiver closed the channel"))
            elif isinstance(event, ev.ChannelLost):
                handle = self._handles.pop(event.chanid, None)
                lost = LostInTransit(f"channel {event.chanid} was lost in transit")
                if isinstance(handle, Receiver):
                    handle.inbox.lost(lost)
                elif isinstance(handle, Sender):
                    handle.gate.failed(lost)
            elif isinstance(event, ev.HandshakeCompleted):
                self._opened(event.peer_headers)
                connection_events.append(event)
            elif isinstance(event, ev.ConnectionTerminated):
                self.end(connection_lost(event))
                connection_events.append(event)
            event = next_event()
        return connection_events

    def _opened(self, peer_headers: Headers) -> None:
        """The Aqueduct handshake completed: the peer's headers, and the entrypoint handle."""
        self.peer_headers = peer_headers
        self.peer_content_type = content_type(peer_headers, CBOR)
        # The client's entrypoint is a Sender, the server's a Receiver.
        self._entry = networked_handle(self, ENTRYPOINT, sending=self.side is Side.CLIENT)

    def entrypoint(self) -> Sender | Receiver:
        """The entrypoint handle (Sender on the client, Receiver on the server)."""
        assert self._entry is not None, "the Aqueduct handshake has not completed"
        return self._entry

    def _messages_received(self, event: ev.MessagesReceived) -> None:
        """Delivered messages to their receiver: a plain run in bulk, anything else one by one.

        A plain run (no headers, no attachments, no middleware) is decoded
        and queued without a ``Message`` per message; a message with headers
        or attachments (a run of one), or any message under middleware (which
        may add headers), takes ``_message_received``.
        """
        if event.headers or event.attachments or self.middleware:
            for payload, cost in zip(event.payloads, event.costs, strict=True):
                self._message_received(event.chanid, event.headers, event.attachments, payload, cost)
            return
        receiver = self._handles.get(event.chanid)
        if not isinstance(receiver, Receiver):
            return
        inbox = receiver.inbox
        decode = plain_decoder(self.peer_content_type)
        if decode is None:
            inbox.values_arrived(event.payloads, event.costs)
            return
        costs = event.costs
        try:
            inbox.values_arrived([decode(payload) for payload in event.payloads], costs)
            return
        except PayloadError:
            pass  # decode again one by one: the messages before the bad one, then its error
        values: list[Any] = []
        start = 0
        for i, payload in enumerate(event.payloads):
            try:
                values.append(decode(payload))
            except PayloadError as exc:  # in order: the messages before it, then the error
                inbox.values_arrived(values, costs[start:i])
                inbox.undecodable_arrived(exc, costs[i])
                values, start = [], i + 1
        inbox.values_arrived(values, costs[start:])

    def _message_received(
        self, chanid: int, headers: Headers, attachments: tuple[ev.Attachment, ...], payload: bytes, cost: int
    ) -> None:
        """One message the general way: handles for its attachments, middleware, a ``Message``."""
        handles = tuple([self._adopt(a) for a in attachments]) if attachments else ()
        receiver = self._handles.get(chanid)
        if not isinstance(receiver, Receiver) or receiver.inbox.closed:
            # Closed locally meanwhile (its close may still wait for announcements):
            # the core treats it as closed, and its close ends what this message carried.
            for handle in handles:
                handle.dropped_unread()
            return
        if self.middleware:  # (a call per message saved when there is none)
            headers = run_middleware(self.middleware, "incoming", chanid, headers, self.peer_headers)
        try:
            value = decode_value(payload, headers, handles, self.peer_content_type)
        except PayloadError as exc:
            receiver.inbox.undecodable_arrived(exc, cost)
            return
        receiver.inbox.message_arrived(Message(value, headers, handles), cost)

    def _adopt(self, attachment: ev.Attachment) -> Sender | Receiver:
        """A handle for a channel the peer attached to a message."""
        chanid = attachment.chanid
        return networked_handle(
            self,
            chanid,
            sending=chanid_sender(chanid) == self.side,
            oneshot=chanid_oneshot(chanid),
            headers=attachment.headers,
        )

    def end(self, lost: ConnectionLost) -> None:
        """The connection ended: every handle learns it (once)."""
        if self.terminated is not None:
            return
        self.terminated = lost
        handles = list(self._handles.values())
        self._handles.clear()
        for handle in handles:
            if isinstance(handle, Receiver):
                handle.inbox.ended(lost)  # buffered messages stay readable, then ConnectionLost
            elif isinstance(handle, Sender):
                handle.gate.failed(lost)

    # ------------------------------------------------------------ reads the core must hear of
    def hand_over_dequeued(self, now: float) -> None:
        """Tell the core what the application read since the last flush (one call per channel)."""
        if self._dequeued:
            core = self.core
            for chanid, nbytes in self._dequeued.items():
                core.dequeued(chanid, nbytes, now)
            self._dequeued.clear()

    # ------------------------------------------------------------ Link (for handles)
    def _check_open(self) -> None:
        if self.terminated is not None:
            raise self.terminated

    def new_channel(self, sender_is_local: bool, oneshot: bool) -> int:
        self._check_open()
        sender_side = self.side if sender_is_local else Side(1 - self.side)
        return self.core.new_channel(sender_side, oneshot)

    def register(self, chanid: int, handle: Sender | Receiver) -> None:
        self._handles[chanid] = handle

    def dropped(self, chanid: int) -> None:
        if self.terminated is None and not self._loop.is_closed():
            # Garbage collection may run anywhere, even inside the core: defer.
            self._loop.call_soon_threadsafe(self._release, chanid)

    def _release(self, chanid: int) -> None:
        core = self.core
        if self.terminated is not None or chanid not in core.channels:
            return  # the channel already ended
        now = self._loop.time()
        try:
            if chanid_sender(chanid) == self.side:
                core.cancel(chanid, now)
            else:
                core.close_receiver(chanid, now)
        except LocalProtocolError:
            return  # finishing already: nothing to release
        self._pump.transmit_soon()

    def send(
        self, chanid: int, payloads: Sequence[bytes], headers: Headers, attachments: tuple[AttachmentOut, ...]
    ) -> tuple[int, bool]:
        """Hand ``payloads`` to the core as messages of ``chanid``: how many were taken, and whether room is left.

        The one send of every networked handle: ``Sender.send`` hands a run
        of one, ``send_many`` runs of raw bytes (see ``ConnectionMachine.send``).
        Middleware sees every message on its own, as it always did: with
        middleware, a run goes to the core message by message.
        """
        if self.terminated is not None:
            raise self.terminated
        middleware = self.middleware
        if middleware:
            if len(payloads) > 1:
                return self._send_each(chanid, payloads, headers)
            headers = run_middleware(middleware, "outgoing", chanid, headers, self.peer_headers)
        taken, settled = self.core.send(
            chanid,
            payloads,
            headers,
            tuple([ev.Attachment(a.chanid, a.headers) for a in attachments]) if attachments else (),
            self._loop.time(),
        )
        self._coalescer.sent(len(payloads[0]) if taken == 1 else sum(map(len, payloads[:taken])), taken)
        if settled:
            return taken, True
        self._pump.dispatch_events()  # an evicted message may have lost attached channels
        return taken, not self.core.send_blocked(chanid)

    def _send_each(self, chanid: int, payloads: Sequence[bytes], headers: Headers) -> tuple[int, bool]:
        """A run under middleware: one message at a time, while the sender has room."""
        taken, room = 0, True
        for payload in payloads:
            if not room:
                break
            room = self.send(chanid, (payload,), headers, ())[1]
            taken += 1
        return taken, room

    def send_blocked(self, chanid: int) -> bool:
        if self.terminated is not None:
            return False  # the send itself raises ConnectionLost
        try:
            return self.core.send_blocked(chanid)
        except LocalProtocolError:
            return False  # the channel ended: the send itself raises its outcome

    def set_mode(self, chanid: int, mode: Mode) -> None:
        self.core.set_mode(chanid, mode)

    def finish(self, chanid: int) -> None:
        self._check_open()
        self.core.finish(chanid, self._loop.time())
        self._pump.transmit_soon()

    def cancel(self, chanid: int) -> None:
        self._handles.pop(chanid, None)
        if self.terminated is None:
            self.core.cancel(chanid, self._loop.time())
            self._pump.dispatch_events()  # channels attached to dropped messages are lost now
            self._pump.transmit_soon()

    def close_receiver(self, chanid: int) -> None:
        self._handles.pop(chanid, None)
        if self.terminated is None:
            now = self._loop.time()
            consumed = self._dequeued.pop(chanid, 0)
            if consumed:  # read before the close: acked, not nacked by it
                self.core.dequeued(chanid, consumed, now)
            self.core.close_receiver(chanid, now)
            self._pump.transmit_soon()

    def dequeued(self, chanid: int, nbytes: int) -> None:
        # Summed per channel and handed to the core once per flush: an
        # application reading a burst of messages costs one core call. The
        # hand-over is not a full transmit: the core usually has nothing to
        # send yet (DEQUEUED is batched), and an aioquic flush per burst read
        # would cost a packet scan and often a lone ACK packet.
        if self.terminated is None:
            pending = self._dequeued
            if not pending:
                self._loop.call_soon(self._hand_over_dequeued)
            pending[chanid] = pending.get(chanid, 0) + nbytes

    def _hand_over_dequeued(self) -> None:
        if self._dequeued and self.terminated is None:  # else a transmit took them already
            self._pump.flush_core()

    def channel_stats(self, chanid: int) -> dict[str, Any]:
        try:
            counters = dataclasses.asdict(self.core.channel_stats(chanid))
        except LocalProtocolError:  # the channel ended: the core dropped its state
            counters = {}
        return {"networked": True, "chanid": chanid, **counters}


def connection_lost(event: ev.ConnectionTerminated) -> ConnectionLost:
    """What handles and the application see of the core's ``ConnectionTerminated``."""
    lost = ConnectionLost(event.reason, event.error_code)
    if event.error_code == PROTOCOL_VIOLATION and not event.by_peer:
        # The peer broke a rule: say so, handles still see ConnectionLost.
        lost.__cause__ = RemoteProtocolError(event.reason)
    return lost
