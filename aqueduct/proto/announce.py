"""When UNRELIABLE senders report their datagrams (SENT_UNRELIABLE), coalesced.

A report per flush cost a busy UNRELIABLE sender a third of its packets, so
senders with unreported datagrams are noted here and reported together once
``announce_delay`` has passed (``ProtoConfig.announce_delay``; 0 reports at
the next transmit). A datagram that carries a handle is reported at the
next transmit regardless: the receiver can ack a datagram only once it is
reported, and a receiver closing right after reading it would otherwise
nack it, its handle reported lost while the application holds it.
"""

from __future__ import annotations

from aqueduct.proto.timers import Timers

ANNOUNCE_TIMER = -1
"""The timer key of the reports (channel timers use chanids, which are >= 0)."""


class Announcements:
    """The senders with unreported datagrams, and whether their report is due."""

    __slots__ = ("senders", "armed", "due", "_timers", "_delay")

    def __init__(self, timers: Timers, delay: float) -> None:
        self.senders: set[int] = set()
        self.armed = False  # the report timer runs for them
        self.due = False  # the timer fired (or a handle waits): the next transmit reports
        self._timers = timers
        self._delay = delay

    def note(self, chanid: int, urgent: bool) -> None:
        """Sender ``chanid`` has datagrams to report; ``urgent`` ones carry attachments."""
        self.senders.add(chanid)
        if urgent:
            self.due = True

    def arm(self, now: float) -> None:
        """Start the report timer for datagrams just noted (the caller checks ``armed`` first)."""
        self.armed = True
        if self._delay:
            self._timers.schedule(ANNOUNCE_TIMER, now + self._delay)
        else:
            self.due = True

    def take_due(self) -> set[int]:
        """The senders to report now (empty until due); the next report starts afresh."""
        if not self.due:
            return set()
        senders, self.senders = self.senders, set()
        self.due = self.armed = False
        return senders
