"""When a burst of application sends is flushed to the network.

Every ``send()`` used to schedule a flush for the next turn of the event
loop, so an application sending a few messages per turn paid a whole
flush per turn: a pass through aioquic's packet builder and, since QUIC
DATAGRAMs are never split, a part-filled last packet each time. With
small UNRELIABLE messages that per-flush work cost more than the messages
themselves: our sender reached about 60 % of its rate when it sent 16
messages per loop turn instead of 64 (``bench.run --only
unreliable_small``), and the raw aioquic baseline, which always has a
backlog, did not care.

:class:`SendCoalescer` holds the flush while the application keeps
sending. At each turn of the loop after a send it flushes, unless the
application sent two or more messages during the turn that just ended;
and it flushes anyway once ``max_bytes`` are waiting or the oldest has
waited ``max_delay`` seconds. So an application that stops (it awaits
something else, or its send waits for the window) is flushed at the next
turn as before, and so is one that sends one message per turn. Only an
application that keeps sending bursts waits, at most ``max_delay``: the
idea of Nagle's algorithm or Kafka's ``linger.ms``, bounded by the loop's
own pace. Any other flush (a received packet, a timer) takes everything
waiting with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

# What may wait while the application keeps sending: about a dozen full
# QUIC packets, or one millisecond (see the module docstring).
FLUSH_BYTES = 16 * 1024
FLUSH_DELAY = 0.001


class SendCoalescer:
    """Decides, one loop turn at a time, whether the sends so far are flushed now."""

    __slots__ = ("_loop", "_flush", "max_bytes", "max_delay", "_bytes", "_count", "_seen", "_since", "_check")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        flush: Callable[[], None],
        max_bytes: int = FLUSH_BYTES,
        max_delay: float = FLUSH_DELAY,
    ) -> None:
        self._loop = loop
        self._flush = flush
        self.max_bytes = max_bytes
        self.max_delay = max_delay
        self._bytes = 0  # sent since the last flush
        self._count = 0  # messages sent since the last flush
        self._seen = 0  # ``_count`` at the last check: two more since then is a burst
        self._since = 0.0  # when the first of them was sent
        self._check: asyncio.Handle | None = None

    def sent(self, nbytes: int, count: int = 1) -> None:
        """The application handed over ``count`` messages of ``nbytes`` in all: flush them soon."""
        if not self._count:
            self._since = self._loop.time()
        self._bytes += nbytes
        self._count += count
        if self._check is None:
            self._check = self._loop.call_soon(self._on_turn)

    def flushed(self) -> None:
        """A flush took everything sent so far (whatever caused it)."""
        self._bytes = self._count = self._seen = 0

    def cancel(self) -> None:
        """The connection ended: no flush is due any more."""
        if self._check is not None:
            self._check.cancel()
            self._check = None
        self.flushed()

    def _on_turn(self) -> None:
        self._check = None
        count = self._count
        if not count:
            return  # another flush already took them
        if (
            count - self._seen > 1
            and self._bytes < self.max_bytes
            and self._loop.time() - self._since < self.max_delay
        ):
            self._seen = count
            self._check = self._loop.call_soon(self._on_turn)
            return
        self._flush()
