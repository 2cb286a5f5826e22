"""When a refused client should come back: a busy server's schedule, like HTTP's Retry-After.

A server at its handshake bound refuses new connections (CONNECTION_REFUSED,
see :mod:`aqueduct.runtime.backends.quic_server`). Clients that only know their own
backoff come back far too soon when thousands wait: measured with 2,500
producers connecting at once, each was refused about nine times, and
building those doomed attempts (keys, TLS hello, a socket) cost the
producers more CPU than the handshakes that succeeded.

So the refusal names a window to come back in, in its reason phrase
(``busy: retry within 4.20 s, not before 3.95 s``). The server cannot count
the crowd (a retry comes from a new port with a new connection id), and an
earlier hint that guessed the crowd from the refusals, doubling its window
each second, sat at its 60 s cap through a whole storm: the last producer
of 2,000 came back minutes after the queue could have cleared. What the
server *can* know is its own capacity, and that is enough:

- **Capacity by Little's law.** While every slot is taken, the handshakes
  completed per second are ``slots / mean handshake duration``; the server
  passes each completed handshake's duration (an exponentially weighted
  mean), so the estimate exists from the first completions after a restart.
  Before any, an assumed duration of :data:`PRIOR_DURATION`: a guess too
  short only gets its clients refused again, with a better window.
- **A virtual queue.** Each refusal is given the next free slot of a promised
  schedule, ``T_next = max(T_next, now) + 1 / capacity``, and told a window
  starting at that slot, :data:`MIN_WINDOW` wide (or one slot if slots are
  longer): the refused are spread evenly over exactly the time the server
  needs for them, not over 60 s when the queue clears in 5. Nothing is
  promised beyond :data:`MAX_WINDOW`: a client refused when the schedule is
  full is told the window at the cap and gets a slot when it comes back.

Clients that only read ``retry within B s`` (the phrase's first part, which
older clients search for) wait up to B and are refused again if early;
clients that read both wait a random time between the two (jitter inside
their slot's window). Bounded state, O(1) per event, no per-client memory:
a refusal stays cheap however large the storm. Pure bookkeeping: the caller
passes the time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aqueduct.proto.errors import ConnectionLost

CONNECTION_REFUSED = 0x2  # RFC 9000 section 20.1
MIN_WINDOW = 0.25
"""The narrowest window named: clients' timers and the network jitter that much anyway."""
MAX_WINDOW = 60.0
"""Nothing is promised further ahead: a client commits to its wait, the server's capacity may change."""
PRIOR_DURATION = 0.25
"""Seconds a handshake is assumed to take before one has completed."""
_WEIGHT = 1 / 16  # of each completed handshake's duration in the running mean

_REASON = "busy: retry within {:.2f} s"
_LATER = ", not before {:.2f} s"
_WITHIN = re.compile(r"busy: retry within ([0-9]+(?:\.[0-9]+)?) s")
_NOT_BEFORE = re.compile(r", not before ([0-9]+(?:\.[0-9]+)?) s")


@dataclass(frozen=True)
class RetryWindow:
    """Come back between ``not_before`` and ``within`` seconds from the refusal."""

    not_before: float
    within: float


def busy_reason(window: RetryWindow) -> str:
    """The reason phrase of a refusal that names ``window`` (from now on: the older, shorter phrase)."""
    later = _LATER.format(window.not_before)
    return _REASON.format(window.within) + ("" if later == _LATER.format(0.0) else later)


def retry_window(lost: ConnectionLost) -> RetryWindow | None:
    """The window a busy server's refusal named, or None if ``lost`` is not one.

    A phrase without ``not before`` (an older server) means from now on.
    """
    if lost.code != CONNECTION_REFUSED:
        return None
    return window_named(lost.reason)


def window_named(reason: str) -> RetryWindow | None:
    """The window a refusal's reason phrase names (:func:`busy_reason`), or None if it names none.

    For refusals that are no QUIC close: a connector ERROR frame's reason
    (a bridge that refuses HELLO while it drains, over TCP too).
    """
    within = _WITHIN.search(reason)
    if within is None:
        return None
    not_before = _NOT_BEFORE.search(reason, within.end())
    return RetryWindow(float(not_before.group(1)) if not_before else 0.0, float(within.group(1)))


def retry_within(lost: ConnectionLost) -> float | None:
    """The end of the window a busy server's refusal named, or None if ``lost`` is not one."""
    window = retry_window(lost)
    return window.within if window else None


class RetryHint:
    """The schedule a server at its bound of ``slots`` handshakes promises the clients it refuses."""

    __slots__ = ("slots", "duration", "next_slot")

    def __init__(self, now: float, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        self.slots = slots
        self.duration = PRIOR_DURATION  # mean seconds a completed handshake took
        self.next_slot = now  # when the schedule's next free slot begins

    @property
    def capacity(self) -> float:
        """Handshakes a second with every slot taken (Little's law)."""
        return self.slots / self.duration

    def completed(self, duration: float) -> None:
        """A handshake completed after ``duration`` seconds (its slot is free for the next client)."""
        self.duration += _WEIGHT * (max(duration, 1e-6) - self.duration)

    def refused(self, now: float) -> RetryWindow:
        """A client was refused: the window of the next free slot of the schedule."""
        start = max(self.next_slot, now)
        interval = 1.0 / self.capacity
        width = max(MIN_WINDOW, interval)
        if start + interval - now > MAX_WINDOW - width:  # beyond what may be promised
            return RetryWindow(MAX_WINDOW - width, MAX_WINDOW)
        self.next_slot = start + interval
        return RetryWindow(start - now, start - now + width)


__all__ = ["MAX_WINDOW", "MIN_WINDOW", "RetryHint", "RetryWindow", "busy_reason", "retry_window", "retry_within", "window_named"]
