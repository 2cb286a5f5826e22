"""How ``aqueduct-produce --rate`` spaces its records: on schedule, and a bounded catch-up after a pause.

``--rate N`` keeps a schedule, record ``n`` due ``n / N`` seconds after
the start, so the run's average is ``N`` whatever the network does. A
pause (a reconnect, a bridge withholding credits) puts the run behind
that schedule; the records it owes then go out no faster than
:data:`CATCH_UP` times the rate, after a burst of at most :data:`BURST`
seconds' worth at that pace. Without the bound the whole debt left at
once: about 10,000 records after a ten-second reconnect at
``--rate 1000``, landing on a bridge that was just coming back.

The bound is a virtual schedule of its own (the generic cell rate
algorithm): each record moves it ``1 / (CATCH_UP * rate)`` seconds on
from the later of itself and now, and a record may go once it is at most
``BURST`` ahead of now. On schedule it never binds: records leave
``1 / rate`` apart, twice its spacing. Sans-IO: the caller says what
time it is.
"""

from __future__ import annotations

#: after a pause, the records behind schedule go out at most this many times ``--rate``
CATCH_UP = 2.0
#: seconds of that pace that may go at once (also what absorbs the event loop's jitter)
BURST = 0.05


class Pacing:
    """When the next record of a ``rate``-per-second run may go; :meth:`sent` after each."""

    def __init__(self, rate: float, start: float) -> None:
        self.rate = rate
        self.start = start
        self.count = 0  # records sent so far
        self._spacing = 1.0 / (CATCH_UP * rate)
        self._bound = start  # the catch-up bound's virtual time of the next record

    def wait(self, now: float) -> float:
        """Seconds from ``now`` until the next record may go (0: at once)."""
        due = max(self.start + self.count / self.rate, self._bound - BURST)
        return max(0.0, due - now)

    def sent(self, now: float, n: int = 1) -> None:
        """``n`` records went at ``now``."""
        self.count += n
        self._bound = max(self._bound, now) + n * self._spacing
