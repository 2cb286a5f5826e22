"""How long a refused client should wait: a busy server's hint, like HTTP's Retry-After.

A server at its handshake bound refuses new connections (CONNECTION_REFUSED,
see :mod:`aqueduct.runtime.backends.quic_server`). Clients that only know their own
backoff come back far too soon when thousands wait: measured with 2,500
producers connecting at once, each was refused about nine times, and
building those doomed attempts (keys, TLS hello, a socket) cost the
producers more CPU than the handshakes that succeeded.

So the refusal says how long to spread the retry over, in its reason
phrase (``busy: retry within 4.2 s``): a client waits a random time up to
that. :class:`RetryHint` aims the window at crowd / capacity, the time the
server needs to let everyone waiting in. Neither is known directly (a
retry comes from a new port with a new connection id), but while clients
spread over a window ``w``, each comes back about every ``w / 2``, so the
refusals of one second say ``crowd ~ refused * w / 2``; and while the
server refuses, its completed handshakes per second are its capacity.
Once a second the window is scaled by ``refused / (2 * completed)``, by at
most a factor of two: a client that drew a long wait is committed to it,
so the window must not overshoot, while one told too short a wait is only
refused again with a better hint. A second without a refusal halves it.
Clients that do not read the hint still get their own backoff.

Pure bookkeeping: the caller passes the time.
"""

from __future__ import annotations

import re

from aqueduct.proto.errors import ConnectionLost

CONNECTION_REFUSED = 0x2  # RFC 9000 section 20.1
MIN_WINDOW = 0.25
MAX_WINDOW = 60.0
_PERIOD = 1.0  # seconds between adjustments
_STEP = (0.5, 2.0)  # a window changes by at most these factors per adjustment

_REASON = "busy: retry within {:.2f} s"
_PARSE = re.compile(r"busy: retry within ([0-9]+(?:\.[0-9]+)?) s")


def busy_reason(window: float) -> str:
    """The reason phrase of a refusal that asks for a retry within ``window`` seconds."""
    return _REASON.format(window)


def retry_within(lost: ConnectionLost) -> float | None:
    """The window a busy server's refusal asked for, or None if ``lost`` is not one."""
    if lost.code != CONNECTION_REFUSED:
        return None
    match = _PARSE.search(lost.reason)
    return float(match.group(1)) if match else None


class RetryHint:
    """The retry window a server tells the clients it refuses (see the module docstring)."""

    def __init__(self, now: float, window: float = MIN_WINDOW) -> None:
        self.window = window
        self._since = now
        self._completed = 0  # handshakes completed this period
        self._refused = 0

    def tick(self, now: float) -> None:
        """Time passes (a datagram arrived): adjust the window once a second."""
        self._roll(now)

    def completed(self) -> None:
        """A handshake completed (its slot is free for the next client)."""
        self._completed += 1

    def refused(self, now: float) -> float:
        """A client was refused: the window to tell it."""
        self._roll(now)
        self._refused += 1
        return self.window

    def _roll(self, now: float) -> None:
        if now - self._since < _PERIOD:
            return
        if self._refused:
            low, high = _STEP
            factor = min(high, max(low, self._refused / (2 * max(1, self._completed))))
        else:
            factor = _STEP[0]
        self.window = min(MAX_WINDOW, max(MIN_WINDOW, self.window * factor))
        self._since = now
        self._completed = self._refused = 0


__all__ = ["RetryHint", "busy_reason", "retry_within"]
