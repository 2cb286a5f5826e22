"""Drive the sans-IO core (:class:`aqueduct.proto.connection.ConnectionMachine`) over one QUIC connection.

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
  :class:`~aqueduct.runtime.driver.coalesce.SendCoalescer`, so a burst of sends
  becomes one flush even when it spans turns of the loop;
* the core's timer is armed with ``loop.call_at``;
* core events go to the handles through the driver's
  :class:`~aqueduct.runtime.driver.handle_link.HandleLink`, which is also the
  :class:`~aqueduct.runtime.handles.handle.Link` networked handles talk through;
  the driver acts on the connection's own events (handshake done, ended).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from aqueduct.proto import events as ev
from aqueduct.proto.connection import ConnectionMachine
from aqueduct.proto.errors import ConnectionLost
from aqueduct.runtime.driver.coalesce import SendCoalescer
from aqueduct.runtime.driver.framelog import FrameLog
from aqueduct.runtime.driver.handle_link import PROTOCOL_VIOLATION, HandleLink, connection_lost
from aqueduct.runtime.handles.headers import Middleware
from aqueduct.runtime.transport import NO_REASON, QuicTransport
from aqueduct.wire.chanid import Side


class Driver:
    """Runs one Aqueduct connection over one QUIC connection of any backend."""

    def __init__(
        self,
        transport: QuicTransport,
        *,
        core: ConnectionMachine,
        middleware: tuple[Middleware, ...] = (),
        frame_log: FrameLog | None = None,
        on_ready: Callable[[Driver], None] | None = None,
        keepalive: bool = False,
    ) -> None:
        self._transport = transport
        self._loop = asyncio.get_running_loop()
        self.core = core
        self.side = Side.CLIENT if transport.is_client else Side.SERVER
        self.frame_log = frame_log
        self.terminated: ConnectionLost | None = None
        #: called once when the connection ends (a server forgets it in O(1), not by scanning)
        self.on_terminated: list[Callable[[], None]] = []
        self.ready: asyncio.Future[None] = self._loop.create_future()
        self._on_ready = on_ready
        self._core_timer: asyncio.TimerHandle | None = None
        self._core_timer_at: float | None = None
        # QUIC PINGs keep an idle but healthy connection from hitting the idle
        # timeout, which can then be short enough to notice a dead peer fast.
        self.keepalive = keepalive
        self._keepalive_timer: asyncio.TimerHandle | None = None
        self._pings_sent = 0
        self._rtt = 0.0
        # QUIC datagrams received, not yet handed to the core (see _hand_over_datagrams).
        self._datagrams: list[bytes] = []
        # Stream actions waiting for the datagrams handed to the stack before them
        # to leave (see _release_held): (datagrams that must have left, actions).
        self._held: deque[tuple[int, list[Any]]] = deque()
        self._datagrams_handed = 0
        self._datagrams_left = 0  # of those, how many the stack last said had left (never decreases)
        # Application sends wait for a flush while the application keeps sending.
        self._coalescer = SendCoalescer(self._loop, self.transmit)
        self._flush_soon: asyncio.Handle | None = None  # a transmit() scheduled by transmit_soon
        #: what the connection's handles talk through (and get the core's events from)
        self.link = HandleLink(core, self, self._coalescer, side=self.side, middleware=middleware)

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
        reason = reason or NO_REASON
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

    def transmit_soon(self) -> None:
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

    def flush_core(self) -> None:
        """Hand the core's actions to the stack and send what that queued (no full flush)."""
        if self._flush_core():
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
        self.link.hand_over_dequeued(self._loop.time())
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
        self.dispatch_events()
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
    def dispatch_events(self) -> None:
        """Deliver the core's events to the handles, then act on the connection's own."""
        for event in self.link.deliver_events():
            if isinstance(event, ev.HandshakeCompleted):
                self._aqueduct_ready()
            else:
                self._terminate(self.link.terminated or connection_lost(event))

    def _aqueduct_ready(self) -> None:
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

    def _terminate(self, lost: ConnectionLost) -> None:
        if self.terminated is not None:
            return
        self.terminated = lost
        if not self.ready.done():
            self.ready.set_exception(lost)
            self.ready.exception()  # retrieved: connect() reports it, no "never retrieved" noise
        self.link.end(lost)
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

    # ------------------------------------------------------------ closing
    def close_aqueduct(self, reason: str) -> None:
        """Close the connection the Aqueduct way (code 2, application close)."""
        if self.terminated is None:
            self.core.close(self._loop.time(), reason)
            self.transmit_soon()

    async def wait_closed(self) -> None:
        """Wait until the QUIC connection is gone."""
        await self._transport.wait_closed()

