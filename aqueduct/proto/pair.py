"""Two ``ConnectionMachine`` objects wired back to back in memory, with explicit time.

A deterministic fake network for sans-IO tests and examples: it shuttles
``transmit()`` actions from one side to the other, delivers timers when time
is advanced, collects events, and can drop, hold (deliver late) or reorder
datagrams and deliver a batch of stream writes in reverse order, all by
script. No clock, no randomness unless the caller brings it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from aqueduct.proto.config import ProtoConfig
from aqueduct.proto.connection import ConnectionMachine
from aqueduct.proto.events import (
    Attachment,
    ConnectionCloseQueued,
    DatagramQueued,
    Event,
    MessagesReceived,
    StreamDataQueued,
    StreamResetQueued,
)
from aqueduct.wire.varint import Headers

Fate = Literal["deliver", "drop", "hold"]
DatagramScript = Callable[[str, int, bytes], Fate]
"""Called as (sending side "client"/"server", index of that side's datagram, bytes)."""


@dataclass(slots=True)
class Delivered:
    """One delivered message as a script sees it: a ``MessagesReceived`` is recorded as one per message.

    (Scripts then see one record per message, whichever run the core
    gathered it in; ``tests/unit/test_proto_message_runs.py`` checks the runs.)
    """

    chanid: int
    headers: Headers
    attachments: tuple[Attachment, ...]
    payload: bytes
    cost: int


class Pair:
    """A client and a server connection and the wire between them."""

    def __init__(
        self,
        client: ProtoConfig | None = None,
        server: ProtoConfig | None = None,
        *,
        auto_dequeue: bool = True,
        datagrams: DatagramScript | None = None,
        reverse_streams: bool = False,
        rtt: float | None = None,
    ) -> None:
        self.client = ConnectionMachine(True, client)
        self.server = ConnectionMachine(False, server)
        self.now = 0.0
        self.auto_dequeue = auto_dequeue
        self.datagram_script = datagrams
        self.reverse_streams = reverse_streams
        self.events: dict[str, list[Event | Delivered]] = {"client": [], "server": []}
        self.closes: dict[str, ConnectionCloseQueued] = {}
        self.held: list[tuple[str, bytes]] = []
        self._dgram_count = {"client": 0, "server": 0}
        if rtt is not None:
            self.client.set_rtt(rtt)
            self.server.set_rtt(rtt)

    def conn(self, side: str) -> ConnectionMachine:
        return self.client if side == "client" else self.server

    def handshake(self) -> None:
        self.client.initiate(self.now)
        self.flush()

    # ------------------------------------------------------------ moving bytes

    def _collect(self, side: str) -> None:
        """Record events; a ``MessagesReceived`` is recorded as one ``Delivered`` per message."""
        conn = self.conn(side)
        while (ev := conn.next_event()) is not None:
            if not isinstance(ev, MessagesReceived):
                self.events[side].append(ev)
                continue
            for payload, cost in zip(ev.payloads, ev.costs, strict=True):
                self.events[side].append(Delivered(ev.chanid, ev.headers, ev.attachments, payload, cost))
                if self.auto_dequeue:
                    conn.dequeued(ev.chanid, cost, self.now)

    def flush(self, max_rounds: int = 10_000) -> None:
        """Shuttle actions both ways until neither side has anything to send."""
        for _ in range(max_rounds):
            moved = False
            for side, other in (("client", "server"), ("server", "client")):
                self._collect(side)
                actions = self.conn(side).transmit()
                if actions:
                    moved = True
                    self._deliver(side, other, actions)
                self._collect(other)
            if not moved:
                return
        raise AssertionError(f"Pair.flush: still busy after {max_rounds} rounds")

    def _deliver(self, side: str, other: str, actions: list) -> None:
        dst = self.conn(other)
        streams = [a for a in actions if isinstance(a, StreamDataQueued)]
        if self.reverse_streams:
            streams.reverse()
        for a in streams:
            dst.receive_stream_data(a.stream_id, a.data, a.end_stream, self.now)
        for a in actions:
            if isinstance(a, StreamResetQueued):
                dst.receive_stream_reset(a.stream_id, a.error_code, self.now)
            elif isinstance(a, DatagramQueued):
                i = self._dgram_count[side]
                self._dgram_count[side] = i + 1
                fate = self.datagram_script(side, i, a.data) if self.datagram_script else "deliver"
                if fate == "deliver":
                    dst.receive_datagram(a.data, self.now)
                elif fate == "hold":
                    self.held.append((other, a.data))
            elif isinstance(a, ConnectionCloseQueued):
                self.closes[side] = a

    def release_held(self) -> None:
        """Deliver held datagrams now (late), in the order they were held."""
        held, self.held = self.held, []
        for dst, data in held:
            self.conn(dst).receive_datagram(data, self.now)
        self.flush()

    def deliver_held(self, index: int) -> None:
        """Deliver one held datagram now (possibly out of order)."""
        dst, data = self.held.pop(index)
        self.conn(dst).receive_datagram(data, self.now)
        self.flush()

    def drop_held(self, index: int) -> None:
        """Lose one held datagram."""
        del self.held[index]

    # ------------------------------------------------------------ time

    def advance(self, dt: float) -> None:
        """Move time forward by ``dt``, firing every timer due on the way."""
        end = self.now + dt
        self.flush()
        for _ in range(100_000):
            due = [t for t in (self.client.get_timer(), self.server.get_timer()) if t is not None]
            nxt = min(due) if due else None
            if nxt is None or nxt > end:
                break
            self.now = max(self.now, nxt)
            self.client.handle_timer(self.now)
            self.server.handle_timer(self.now)
            self.flush()
        else:
            raise AssertionError("Pair.advance: timers keep firing")
        self.now = end
        self.flush()

    def settle(self, seconds: float = 5.0) -> None:
        """Flush and let every timer within ``seconds`` fire."""
        self.flush()
        self.advance(seconds)

    # ------------------------------------------------------------ reading events

    def of(self, side: str, kind: type) -> list:
        return [e for e in self.events[side] if isinstance(e, kind)]
