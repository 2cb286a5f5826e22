"""Tunables of the protocol core (spec section 4 defaults), one frozen dataclass.

Kept apart from the state machines so the runtime, the tests and the interop
endpoints can build a configuration without importing any machinery.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aqueduct.proto.errors import RemoteProtocolError
from aqueduct.wire.frames import Limits
from aqueduct.wire.varint import Headers

WINDOW_HEADER = "aqueduct-window"
"""Connection header by which a side announces the window of the channels it receives."""

DEFAULT_WINDOW = 1 << 20

FrameLog = Callable[[dict], None]
"""Debug hook: receives one dict per frame sent or received (qlog-like)."""


@dataclass(frozen=True, slots=True)
class ProtoConfig:
    """Everything a ``ConnectionMachine`` may be told up front.

    ``window`` is W0: the byte credit each remote sender gets on channels we
    receive (announced with the ``aqueduct-window`` header when it differs
    from the 1 MiB default). ``ack_delay`` bounds how long a received
    MESSAGE waits for its ACK_RELIABLE; ``dequeued_delay`` bounds how long
    dequeued bytes wait for their DEQUEUED report (W0/4 bytes send at once).
    ``max_queued`` bounds each sender's local queue (messages the window did
    not admit yet): a reliable sender then reports "blocked", an unreliable
    one evicts its oldest message. ``max_queued_bytes`` bounds a reliable
    sender's queue by payload bytes as well (a count alone let 1024 large
    messages pile up); one message is always queued, however big.
    ``announce_delay`` is how long a sender's SENT_UNRELIABLE report waits
    after the first datagram it covers: one report per connection and delay,
    not one per flush, whose small stream packet cost a busy UNRELIABLE
    sender a third of its packets (the receipt deadline, at least 100 ms,
    runs from the report, so a few ms only delay acks and nacks).
    ``max_open_streams`` caps the per-message streams (UNORDERED, and
    UNRELIABLE's fallback) one sender has sent but not seen acked: QUIC
    stacks scan every stream they hold per packet, so thousands at once
    slow the whole connection down; the rest waits in the local queue.
    """

    headers: Headers = ()
    window: int = DEFAULT_WINDOW
    limits: Limits = field(default_factory=Limits)
    ack_delay: float = 0.1
    dequeued_delay: float = 0.05
    min_receipt_deadline: float = 0.1
    announce_delay: float = 0.005
    initial_receipt_deadline: float = 1.0
    max_datagram_size: int = 1200
    max_queued: int = 1024
    max_queued_bytes: int = 4 << 20
    max_open_streams: int = 512
    frame_log: FrameLog | None = None

    def __post_init__(self) -> None:
        if self.window <= 0:
            raise ValueError(f"ProtoConfig: window must be > 0, got {self.window}")
        if self.max_queued <= 0:
            raise ValueError(f"ProtoConfig: max_queued must be > 0, got {self.max_queued}")
        if self.max_queued_bytes <= 0:
            raise ValueError(
                f"ProtoConfig: max_queued_bytes must be > 0, got {self.max_queued_bytes}"
            )
        if self.announce_delay < 0:
            raise ValueError(f"ProtoConfig: announce_delay must be >= 0, got {self.announce_delay}")
        if self.max_open_streams <= 0:
            raise ValueError(
                f"ProtoConfig: max_open_streams must be > 0, got {self.max_open_streams}"
            )

    def headers_to_send(self) -> Headers:
        """Our CONNECTION_HEADERS: the configured ones plus the window when not default."""
        if self.window == DEFAULT_WINDOW or any(k == WINDOW_HEADER for k, _ in self.headers):
            return self.headers
        return (*self.headers, (WINDOW_HEADER, str(self.window).encode()))


def peer_window(headers: Headers) -> int | None:
    """The ``aqueduct-window`` value in the peer's headers, or ``None`` when absent."""
    for key, value in headers:
        if key == WINDOW_HEADER:
            try:
                n = int(value.decode("ascii"))
            except (UnicodeDecodeError, ValueError):
                n = 0
            if n <= 0:
                raise RemoteProtocolError(
                    f"CONNECTION_HEADERS: {WINDOW_HEADER} must be a positive decimal integer, "
                    f"got {value!r}"
                )
            return n
    return None
