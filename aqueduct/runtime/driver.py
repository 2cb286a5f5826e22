"""Drive the sans-IO core (:class:`aqueduct.proto.connection.Connection`) over one QUIC connection.

One :class:`Driver` per QUIC connection, whichever stack carries it (the
stack is behind :class:`~aqueduct.runtime.transport.QuicTransport`; its
backend feeds the driver and is driven by it). No thread or task per
channel:

* the stack's events are fed into the core as they are parsed, except
  QUIC datagrams, which wait to be handed over in one call (a whole read
  batch), before the next other event or flush;
* the core's actions are applied to the stack in :meth:`Driver.flush`,
  which the backend calls once after each burst of received packets and
  each of its timers; calls from the application only schedule one:
  ``finish``, ``cancel`` ... with ``call_soon``, sends through a
  :class:`~aqueduct.runtime.coalesce.SendCoalescer`, so a burst of sends
  becomes one flush even when it spans turns of the loop;
* the core's timer is armed with ``loop.call_at``;
* core events are dispatched to the handles registered per chanid.

The driver is also the :class:`~aqueduct.runtime.handles.Link` networked
handles talk through.
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from aqueduct.proto import events as ev
from aqueduct.proto.connection import Connection as CoreConnection
from aqueduct.proto.errors import (
    ConnectionLost,
    LocalProtocolError,
    LostInTransit,
    ReceiverClosed,
    RemoteProtocolError,
)
from aqueduct.runtime.coalesce import SendCoalescer
from aqueduct.runtime.delivery import Finished
from aqueduct.runtime.framelog import FrameLog
from aqueduct.runtime.handles import (
    AttachmentOut,
    Message,
    Mode,
    Receiver,
    Sender,
    networked_handle,
)
from aqueduct.runtime.headers import Headers, Middleware, run_middleware
from aqueduct.runtime.payload import (
    CBOR,
    PayloadError,
    content_type,
    decode_value,
    encode_bytes,
    plain_decoder,
)
from aqueduct.runtime.transport import QuicTransport
from aqueduct.wire.chanid import ENTRYPOINT, Side, chanid_oneshot, chanid_sender

PROTOCOL_VIOLATION = 1  # QUIC application error code (spec section 6)


class Driver:
    """Runs one Aqueduct connection over one QUIC connection of any backend."""

    def __init__(
        self,
        transport: QuicTransport,
        *,
        core: CoreConnection,
        middleware: tuple[Middleware, ...] = (),
        frame_log: FrameLog | None = None,
        on_ready: Callable[[Driver], None] | None = None,
        keepalive: bool = False,
    ) -> None:
        self._transport = transport
        self._loop = asyncio.get_running_loop()
        self.core = core
        self.side = Side.CLIENT if transport.is_client else Side.SERVER
        self.middleware = middleware
        self.frame_log = frame_log
        self.peer_headers: Headers = ()
        self.peer_content_type = CBOR  # how to read the peer's messages without content-type
        self.content_type = content_type(core.config.headers)  # our announced default
        self.connection: Any = None  # the public Connection object, set by endpoints
        self.terminated: ConnectionLost | None = None
        #: called once when the connection ends (a server forgets it in O(1), not by scanning)
        self.on_terminated: list[Callable[[], None]] = []
        self.ready: asyncio.Future[None] = self._loop.create_future()
        self._on_ready = on_ready
        # Weak: dropping a handle releases its channel (see ``dropped``).
        self._handles: weakref.WeakValueDictionary[int, Sender | Receiver] = weakref.WeakValueDictionary()
        self._entry: Sender | Receiver | None = None  # kept alive for the connection's lifetime
        self._core_timer: asyncio.TimerHandle | None = None
        self._core_timer_at: float | None = None
        # QUIC PINGs keep an idle but healthy connection from hitting the idle
        # timeout, which can then be short enough to notice a dead peer fast.
        self.keepalive = keepalive
        self._keepalive_timer: asyncio.TimerHandle | None = None
        self._pings_sent = 0
        self._rtt = 0.0
        self._dequeued: dict[int, int] = {}  # bytes the application consumed, not yet told
        # QUIC datagrams received, not yet handed to the core (see _hand_over_datagrams).
        self._datagrams: list[bytes] = []
        # Stream actions waiting for the datagrams handed to the stack before them
        # to leave (see _release_held): (datagrams that must have left, actions).
        self._held: deque[tuple[int, list[Any]]] = deque()
        self._datagrams_handed = 0
        self._datagrams_left = 0  # of those, how many the stack last said had left (never decreases)
        # Application sends wait for a flush while the application keeps sending.
        self._coalescer = SendCoalescer(self._loop, self.transmit)
        self._flush_soon: asyncio.Handle | None = None  # a transmit() scheduled by _transmit_soon

    @property
    def transport(self) -> QuicTransport:
        return self._transport

    # ------------------------------------------------------------ QUIC input (from the backend)
    def datagram_received(self, data: bytes) -> None:
        """A DATAGRAM frame: the hot path of UNRELIABLE, kept for one hand-over per batch."""
        self._datagrams.append(data)

    def stream_data_received(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        if self._datagrams:  # they came first: the core sees them first
            self._hand_over_datagrams()
        self.core.receive_stream_data(stream_id, data, end_stream, self._loop.time())

    def stream_reset_received(self, stream_id: int, error_code: int) -> None:
        if self._datagrams:
            self._hand_over_datagrams()
        self.core.receive_stream_reset(stream_id, error_code, self._loop.time())

    def quic_handshake_completed(self) -> None:
        if self._datagrams:
            self._hand_over_datagrams()
        limit = self._transport.datagram_limit()
        if limit is None:
            # Spec section 1: a peer without RFC 9221 datagrams is refused.
            self._transport.queue_close(
                PROTOCOL_VIOLATION, "peer did not enable QUIC datagrams (max_datagram_frame_size)"
            )
            return
        self.core.set_max_datagram_size(limit)
        if self.side is Side.CLIENT:
            self.core.initiate(self._loop.time())  # the client speaks first (VERSION, CONNECTION_HEADERS)
        self._arm_keepalive()

    def quic_terminated(self, error_code: int, reason: str) -> None:
        """The QUIC connection ended (closed by either side, idle timeout, handshake failure)."""
        if self._datagrams:
            self._hand_over_datagrams()
        reason = reason or "no reason given"
        self._terminate(ConnectionLost(f"connection closed (error code {error_code}): {reason}", error_code))
        # The core's events are dispatched in flush(), which the backend calls
        # right after the whole batch of events of one UDP datagram.

    def _hand_over_datagrams(self) -> None:
        """Hand the QUIC datagrams received so far to the core, in one call.

        Stacks report each DATAGRAM frame as its own event, several per UDP
        packet and a read batch of packets before ``flush``; a core call
        each cost several microseconds per UNRELIABLE message, while one call
        for all of them delivers a channel's run at once. Nothing may see the
        core with datagrams still waiting here, so they go over before any
        other QUIC event, at the start of every flush and before the core's
        timer. Application calls (stats, send ...) cannot come in between:
        the events that queued them are always followed by ``flush`` (at
        the latest when the read batch ends), before the loop runs anything
        else.
        """
        datagrams, self._datagrams = self._datagrams, []
        self.core.receive_datagrams(datagrams, self._loop.time())

    # ------------------------------------------------------------ output
    def transmit(self) -> None:
        """Flush soon: now, or once the backend finished reading its batch of datagrams."""
        self._transport.transmit()

    def _transmit_soon(self) -> None:
        """One :meth:`transmit` at the loop's next turn, however many calls ask for it."""
        if self._flush_soon is None:
            self._flush_soon = self._loop.call_soon(self._transmit_scheduled)

    def _transmit_scheduled(self) -> None:
        self._flush_soon = None
        self.transmit()

    def flush(self) -> None:
        """Apply the core's pending actions to the stack, then send packets (one flush)."""
        if self._flush_soon is not None:  # this flush does what it would have done
            self._flush_soon.cancel()
            self._flush_soon = None
        self._coalescer.flushed()
        self._flush_core()
        self._send_packets()

    def _send_packets(self) -> None:
        """The stack's flush, plus held stream data whose datagrams have just left."""
        transport = self._transport
        transport.send_packets()
        if self._held and self._release_held():
            transport.send_packets()  # the datagrams left: now the stream data announcing them

    def _flush_core(self) -> bool:
        """Hand the core's actions to the stack; True if there were any (packets to send)."""
        if self._datagrams:  # the read batch's datagrams, before anything else
            self._hand_over_datagrams()
        core = self.core
        if self._dequeued:
            now = self._loop.time()
            for chanid, nbytes in self._dequeued.items():
                core.dequeued(chanid, nbytes, now)
            self._dequeued.clear()
        transport = self._transport
        rtt = transport.smoothed_rtt()
        if rtt is not None and rtt != self._rtt:
            self._rtt = rtt
            core.set_rtt(rtt)
        if core.quiet:  # e.g. a datagram that only carried QUIC ACKs: nothing to hand over
            self._arm_core_timer()
            return False
        actions = core.transmit()
        if actions:
            batch = []
            closing = False
            send_datagram = transport.send_datagram
            for action in actions:
                if isinstance(action, ev.DatagramQueued):
                    send_datagram(action.data)
                    self._datagrams_handed += 1
                else:
                    batch.append(action)
                    closing = closing or isinstance(action, ev.ConnectionCloseQueued)
            if batch:
                self._held.append((self._datagrams_handed, batch))
            self._release_held(everything=closing)
        self._dispatch_events()
        self._arm_core_timer()
        return bool(actions)

    def _release_held(self, everything: bool = False) -> bool:
        """Apply held stream actions whose preceding datagrams have left the stack.

        Stacks queue datagrams and send them as congestion control allows,
        while the SENT_UNRELIABLE announcing them (stream data of the same
        flush) could leave at once. The peer's receipt deadline starts at
        the announcement, so it would nack datagrams still waiting in the
        stack: holding stream data until the datagrams before it have left
        keeps "announced" meaning "sent". Stream-only traffic is never held
        (nothing precedes it). A close goes out at once.
        """
        held = self._held
        if not held:
            return False
        transport = self._transport
        if not everything and held[0][0] > self._datagrams_left:
            # Ask the stack only when the answer matters: stream-only traffic
            # never waits for a datagram, and a stack's count may cost a call
            # into its thread (picoquic).
            self._datagrams_left = self._datagrams_handed - transport.pending_datagrams()
        left = self._datagrams_left
        released = False
        while held and (everything or held[0][0] <= left):
            for action in held.popleft()[1]:
                if isinstance(action, ev.StreamDataQueued):
                    transport.send_stream_data(action.stream_id, action.data, action.end_stream)
                elif isinstance(action, ev.StreamResetQueued):
                    transport.reset_stream(action.stream_id, action.error_code)
                elif isinstance(action, ev.ConnectionCloseQueued):
                    transport.queue_close(action.error_code, action.reason)
            released = True
        return released

    def _arm_core_timer(self) -> None:
        at = self.core.get_timer()
        if at == self._core_timer_at:
            return
        if self._core_timer is not None:
            self._core_timer.cancel()
            self._core_timer = None
        self._core_timer_at = at
        if at is not None:
            self._core_timer = self._loop.call_at(at, self._on_core_timer)

    def _arm_keepalive(self) -> None:
        """PING at a third of the negotiated idle timeout: two may be lost before it expires."""
        if self.keepalive and self.terminated is None and not self._transport.pings_itself:
            interval = self._transport.idle_timeout() / 3
            self._keepalive_timer = self._loop.call_later(interval, self._send_keepalive)

    def _send_keepalive(self) -> None:
        self._keepalive_timer = None
        if self.terminated is not None:
            return
        self._pings_sent += 1
        self._transport.send_ping(self._pings_sent)
        self.transmit()
        self._arm_keepalive()

    def _on_core_timer(self) -> None:
        self._core_timer = None
        self._core_timer_at = None
        if self._datagrams:  # (none are ever waiting here: transmit took them; cheap insurance)
            self._hand_over_datagrams()
        self.core.handle_timer(self._loop.time())
        self.transmit()

    # ------------------------------------------------------------ core events
    def _dispatch_events(self) -> None:
        next_event = self.core.next_event
        event = next_event()
        while event is not None:
            if isinstance(event, ev.MessageRunReceived):
                self._message_run_received(event)
            elif isinstance(event, ev.MessageReceived):
                self._message_received(event)
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
                self._aqueduct_ready(event.peer_headers)
            elif isinstance(event, ev.ConnectionTerminated):
                lost = ConnectionLost(event.reason, event.error_code)
                if event.error_code == PROTOCOL_VIOLATION and not event.by_peer:
                    # The peer broke a rule: say so, handles still see ConnectionLost.
                    lost.__cause__ = RemoteProtocolError(event.reason)
                self._terminate(lost)
            event = next_event()

    def _aqueduct_ready(self, peer_headers: Headers) -> None:
        self.peer_headers = peer_headers
        self.peer_content_type = content_type(peer_headers, CBOR)
        # The client's entrypoint is a Sender, the server's a Receiver.
        self._entry = networked_handle(self, ENTRYPOINT, sending=self.side is Side.CLIENT)
        if not self.ready.done():
            self.ready.set_result(None)
        if self._on_ready is not None:
            self._on_ready(self)

    async def wait_ready(self, timeout: float, where: str, abort: Callable[[], None]) -> None:
        """The Aqueduct handshake within ``timeout`` s; else ``abort()`` the connection and raise.

        ``ConnectionLost`` names ``where`` on a timeout; a failed handshake
        raises its own ``ConnectionLost``.
        """
        try:
            await asyncio.wait_for(asyncio.shield(self.ready), timeout)
        except BaseException as exc:
            abort()
            if isinstance(exc, TimeoutError):
                raise ConnectionLost(f"no Aqueduct handshake with {where} within {timeout} s") from None
            raise

    def entrypoint(self) -> Sender | Receiver:
        """The entrypoint handle (Sender on the client, Receiver on the server)."""
        assert self._entry is not None, "the Aqueduct handshake has not completed"
        return self._entry

    def _message_received(self, event: ev.MessageReceived) -> None:
        handles = tuple([self._adopt(a) for a in event.attachments]) if event.attachments else ()
        receiver = self._handles.get(event.chanid)
        if not isinstance(receiver, Receiver) or receiver.inbox.closed:
            # Closed locally meanwhile (its close may still wait for announcements):
            # the core treats it as closed, and its close ends what this message carried.
            for handle in handles:
                handle.dropped_unread()
            return
        headers = event.headers
        if self.middleware:  # (a call per message saved when there is none)
            headers = run_middleware(self.middleware, "incoming", event.chanid, headers, self.peer_headers)
        try:
            value = decode_value(event.payload, headers, handles, self.peer_content_type)
        except PayloadError as exc:
            receiver.inbox.undecodable_arrived(exc, event.cost)
            return
        receiver.inbox.message_arrived(Message(value, headers, handles), event.cost)

    def _message_run_received(self, event: ev.MessageRunReceived) -> None:
        """Plain messages in bulk: decoded and queued without an event or Message each."""
        if self.middleware:  # middleware may add headers: take the general path per message
            for payload, cost in zip(event.payloads, event.costs, strict=True):
                self._message_received(ev.MessageReceived(event.chanid, (), (), payload, cost))
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

    def _terminate(self, lost: ConnectionLost) -> None:
        if self.terminated is not None:
            return
        self.terminated = lost
        if not self.ready.done():
            self.ready.set_exception(lost)
            self.ready.exception()  # retrieved: connect() reports it, no "never retrieved" noise
        handles = list(self._handles.values())
        self._handles.clear()
        for handle in handles:
            if isinstance(handle, Receiver):
                handle.inbox.ended(lost)  # buffered messages stay readable, then ConnectionLost
            elif isinstance(handle, Sender):
                handle.gate.failed(lost)
        if self._core_timer is not None:
            self._core_timer.cancel()
            self._core_timer = None
        if self._keepalive_timer is not None:
            self._keepalive_timer.cancel()
            self._keepalive_timer = None
        self._coalescer.cancel()
        if self.frame_log is not None:
            self.frame_log.event("connection_terminated", {"code": lost.code, "reason": lost.reason})
            self.frame_log.close()
        callbacks, self.on_terminated = self.on_terminated, []
        for callback in callbacks:
            callback()

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
        self._transmit_soon()

    def send_message(
        self, chanid: int, payload: bytes, headers: Headers, attachments: tuple[AttachmentOut, ...]
    ) -> bool:
        self._check_open()
        if self.middleware:
            headers = run_middleware(self.middleware, "outgoing", chanid, headers, self.peer_headers)
        ok = self.core.send_message(
            chanid,
            payload,
            headers,
            tuple([ev.Attachment(a.chanid, a.headers) for a in attachments]) if attachments else (),
            self._loop.time(),
        )
        return self._handed(chanid, ok, len(payload))

    def send_bytes(self, chanid: int, value: bytes) -> bool:
        """``send_message`` of raw bytes with no headers and no attachments, in one step.

        The bulk case of ``Sender.send``: it skips the handle's attachment
        machinery and the general codec, a visible share of a busy sender's
        time per small message. Anything that needs headers (a content-type
        header, middleware) or an error (a closed connection) takes
        ``send_message``.
        """
        payload, headers = encode_bytes(value, self.content_type)
        if headers or self.middleware or self.terminated is not None:
            return self.send_message(chanid, payload, headers, ())
        ok = self.core.send_message(chanid, payload, (), (), self._loop.time())
        return self._handed(chanid, ok, len(payload))

    def send_bytes_run(self, chanid: int, values: Sequence[bytes]) -> int:
        """``send_bytes`` of several values in one step (``Sender.send_many``): how many were taken.

        The core sends what its window admits as one write and queues the
        next ones until its queue is full (``Connection.send_plain_run``);
        0 when raw bytes need headers here, middleware runs, the connection
        ended or the channel is not an open ORDERED one: the caller then
        sends one by one, which also raises what must be raised.
        """
        content_type = self.content_type
        if self.middleware or self.terminated is not None or encode_bytes(b"", content_type)[1]:
            return 0
        payloads = [encode_bytes(value, content_type)[0] for value in values]
        taken = self.core.send_plain_run(chanid, payloads)
        if taken:
            self._coalescer.sent(sum(map(len, payloads[:taken])), taken)
        return taken

    def _handed(self, chanid: int, ok: bool, nbytes: int) -> bool:
        """After the core took a message: flush soon; False if the sender must wait for room."""
        self._coalescer.sent(nbytes)
        if not ok:
            self._dispatch_events()  # an evicted message may have lost attached channels
            return not self.core.send_blocked(chanid)
        return True

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
        self._transmit_soon()

    def cancel(self, chanid: int) -> None:
        self._handles.pop(chanid, None)
        if self.terminated is None:
            self.core.cancel(chanid, self._loop.time())
            self._dispatch_events()  # channels attached to dropped messages are lost now
            self._transmit_soon()

    def close_receiver(self, chanid: int) -> None:
        self._handles.pop(chanid, None)
        if self.terminated is None:
            now = self._loop.time()
            consumed = self._dequeued.pop(chanid, 0)
            if consumed:  # read before the close: acked, not nacked by it
                self.core.dequeued(chanid, consumed, now)
            self.core.close_receiver(chanid, now)
            self._transmit_soon()

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
            if self._flush_core():
                self._send_packets()

    def channel_stats(self, chanid: int) -> dict[str, Any]:
        try:
            counters = dataclasses.asdict(self.core.channel_stats(chanid))
        except LocalProtocolError:  # the channel ended: the core dropped its state
            counters = {}
        return {"networked": True, "chanid": chanid, **counters}

    # ------------------------------------------------------------ closing
    def close_aqueduct(self, reason: str) -> None:
        """Close the connection the Aqueduct way (code 2, application close)."""
        if self.terminated is None:
            self.core.close(self._loop.time(), reason)
            self._transmit_soon()

    async def wait_closed(self) -> None:
        """Wait until the QUIC connection is gone."""
        await self._transport.wait_closed()

