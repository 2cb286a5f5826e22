"""When a refused client should come back: a busy server's queue of numbered turns, like HTTP's Retry-After.

A server at its handshake bound refuses new connections (CONNECTION_REFUSED,
see :mod:`aqueduct.runtime.backends.quic_server`). Clients that only know their own
backoff come back far too soon when thousands wait: measured with 2,500
producers connecting at once, each was refused about nine times, and
building those doomed attempts (keys, TLS hello, a socket) cost the
producers more CPU than the handshakes that succeeded.

So the refusal names a window to come back in, in its reason phrase
(``busy: retry within 4.20 s, not before 3.95 s; turn 2b9c01d4000004d2``).
Two earlier schedules failed in storms, for reasons this one is built
against:

- one doubled its window each second while refusals outnumbered
  completions: it sat at its 60 s cap through a whole storm;
- one gave every refusal the next slot at the end of a paced schedule. The
  server could not tell a producer refused again from a new one (a retry
  comes from a new port with a new connection id), so every repeat took
  another slot: the schedule's length was *refusals* / capacity, not
  producers / capacity; past the 60 s cap every refused producer was told
  the same quarter-second window and came back in one herd (5,000 token
  producers on a loaded machine: 7,851 refusals naming 60 s, 2.8
  handshakes/s, the bridge using a tenth of a core).

The model here is a ticket queue (a bakery's numbered tickets):

- **A turn per producer, kept across refusals.** A producer refused for
  the first time is given the next turn number ``k`` (``issued``). The
  phrase names it; our connector sends it back as its next Initial's QUIC
  token (RFC 9000 section 8.1's address-validation token, which the server
  reads before any TLS work). A producer that names a turn keeps it: refused
  again, it is told when that turn comes, and the queue does not grow.
- **Turns called at the server's capacity.** The turn being served
  (``head``) advances at the handshakes a second the server can complete
  with every slot taken, by Little's law: the handshakes in progress (at
  least ``slots``) over their mean duration, both running means of the
  completions. With every slot taken that is the rate measured; with slots
  free it is what they could do, so a server whose clients were told to
  wait too long (a rate measured while the clients were slow) tells the
  next ones less, and the cap below bounds the wait of those already told.
  (The rate of completions alone, tried first, learns nothing once the
  server is no longer saturated: a storm measured at 3 a second stayed at
  3 a second with the bridge idle and 1,500 producers asleep.) Turn ``k``
  comes ``(k - head) / capacity`` seconds from now. The estimate is re-read
  each time a producer comes back, so a queue promised at a wrong capacity
  (a restarted server's first guess, :data:`PRIOR_RATE`) is corrected at
  the producer's next refusal, never lengthened.
- **A called turn is admitted.** A producer whose turn has come is admitted
  even with every slot taken, up to ``slots`` more (:meth:`HandshakeAdmission.admits`):
  its wait was the server's promise. A newcomer with every slot taken goes
  to the end of the queue. A called turn refused even so (twice the bound
  in progress: the server completes fewer than it measured) moves every
  later turn one place back: a promise not kept is the one thing that
  lengthens the queue.
- **Nothing promised beyond :data:`MAX_WINDOW`.** A turn further ahead is
  told to come back within the cap, at a point of its second half set by
  the turn's number (spread, not all at its end: that was the herd above),
  and is then told its turn. A server that has not yet measured its rate
  over a round of completions (``slots`` of them; a restarted one) promises no farther than
  :data:`PROBE_WINDOW`, or twice the time it has been refusing, the same
  way.
- **A storm starts from the prior, not from a quiet server's figures.**
  Handshakes that ran with slots free take a few milliseconds each, so
  ``slots`` over that duration reads thousands a second (9,528-15,609
  read at the end of fleet runs), which no storm delivers: every turn
  would be called at once, and the whole crowd would come back within a
  quarter second to be refused again. So when a server that has refused
  nobody for :data:`QUIET_SPELL` starts refusing, an estimate last fed by
  such handshakes is dropped: :data:`PRIOR_RATE` and the probe above until
  a round of the storm's own is measured. One measured with every slot
  taken is kept, and so is any within a storm, whose slots free up for
  moments (dropping it there sent the crowd back on the probe's short
  windows again and again).

Table of one Initial's fate (``in progress``: handshakes holding a slot):

================  ============================  ==========================================
in progress       the Initial names             decision
================  ============================  ==========================================
< slots           anything                      admitted
>= slots          no turn of this server        refused, given the next turn (queue grows)
>= slots          a turn not yet called         refused, told when that turn comes
< 2 x slots       a called turn                 admitted (the promise is kept)
>= 2 x slots      a called turn                 refused, told to come back within one round of
                                                handshakes (``slots / capacity``; same turn)
================  ============================  ==========================================

Clients that only read ``retry within B s`` (the phrase's first part, which
older clients search for) wait up to B and are refused again if early;
clients that read both wait a random time between the two (jitter inside
their window). A turn is a number in this process's queue, not a credential:
a client that forges one only gets its handshake run sooner, never more than
twice the bound at once. State is a few numbers, O(1) per event, nothing per
client. Pure bookkeeping: the caller passes the time.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass

from aqueduct.proto.errors import ConnectionLost

CONNECTION_REFUSED = 0x2  # RFC 9000 section 20.1
MIN_WINDOW = 0.25
"""The narrowest window named: clients' timers and the network jitter that much anyway."""
MAX_WINDOW = 60.0
"""Nothing is promised further ahead: a client commits to its wait, the server's capacity may change."""
PRIOR_RATE = 50.0
"""Handshakes a second assumed before any was measured (an aioquic bridge on a loaded core; corrected at each return)."""
_WEIGHT = 1 / 16  # of each completion in the running means, once a few were measured
QUIET_SPELL = 10.0
"""Seconds without a refusal after which a server that starts refusing again forgets what its quiet handshakes measured."""
PROBE_WINDOW = 2.0
"""Before its rate is trusted (just restarted), a server sends nobody farther than this, or than twice the time it has
been refusing, whichever is longer: a rate underestimated would leave it idle while its producers wait out the promise,
and a probe that does not grow with the wait would have thousands retrying every second while handshakes take 20 s
(measured: their doomed attempts then starve the handshakes admitted). The turn keeps their order meanwhile."""

_REASON = "busy: retry within {:.2f} s"
_LATER = ", not before {:.2f} s"
_TURN = "; turn {}"
_WITHIN = re.compile(r"busy: retry within ([0-9]+(?:\.[0-9]+)?) s")
_NOT_BEFORE = re.compile(r", not before ([0-9]+(?:\.[0-9]+)?) s")
_TURN_NAMED = re.compile(r"; turn ([0-9a-f]{16})\b")
_TICKET = struct.Struct("!4sI")  # this server's queue (random per process), the turn's number


@dataclass(frozen=True)
class RetryWindow:
    """Come back between ``not_before`` and ``within`` seconds from the refusal, naming ``turn`` (if any)."""

    not_before: float
    within: float
    turn: bytes = b""


def busy_reason(window: RetryWindow) -> str:
    """The reason phrase of a refusal that names ``window`` (from now on: the older, shorter phrase)."""
    later = _LATER.format(window.not_before)
    phrase = _REASON.format(window.within) + ("" if later == _LATER.format(0.0) else later)
    return phrase + (_TURN.format(window.turn.hex()) if window.turn else "")


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
    turn = _TURN_NAMED.search(reason, within.end())
    return RetryWindow(
        float(not_before.group(1)) if not_before else 0.0,
        float(within.group(1)),
        bytes.fromhex(turn.group(1)) if turn else b"",
    )


def retry_within(lost: ConnectionLost) -> float | None:
    """The end of the window a busy server's refusal named, or None if ``lost`` is not one."""
    window = retry_window(lost)
    return window.within if window else None


@dataclass(frozen=True)
class Admitted:
    """The Initial starts a handshake (it holds a slot until :meth:`HandshakeAdmission.completed` or its end)."""


@dataclass(frozen=True)
class Refused:
    """The Initial is refused; its client is told ``window`` (which names its turn)."""

    window: RetryWindow


class HandshakeAdmission:
    """Which Initials a server at its bound of ``slots`` handshakes admits, and when the refused come back.

    See the module's table. ``queue`` (random bytes, one per process) keeps
    another process's turns, a restarted server's predecessor's, from counting
    here: they are newcomers.
    """

    __slots__ = (
        "slots", "measured", "duration", "load", "head", "issued", "paced_at", "_at", "_since", "_queue", "_quiet",
        "_refused_at",
    )  # fmt: skip

    def __init__(self, now: float, slots: int, queue: bytes | None = None) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        self.slots = slots
        self.measured = 0  # completed handshakes, counted up to a round (slots + 1)
        self.duration = 0.0  # running mean of their durations (seconds) ...
        self.load = 0.0  # ... and of the handshakes in progress as each completed
        self.head = 0.0  # the turn being called: turns below it have come
        self.issued = 0  # turns given so far; the next newcomer refused gets this one
        #: the rate (handshakes/s) the latest refusal was paced at, None before any: what a
        #: report quotes, as :attr:`capacity` read after a storm extrapolates the quiet that follows
        self.paced_at: float | None = None
        self._at = now  # when ``head`` was last advanced
        self._since: float | None = None  # when the server began refusing (None: a slot has been free since)
        self._quiet = False  # the latest completion ran with a slot free (no figure for a storm)
        self._refused_at = float("-inf")  # the latest refusal
        self._queue = os.urandom(_TICKET.size - 4) if queue is None else queue

    @property
    def capacity(self) -> float:
        """Handshakes a second the server completes with every slot taken (:data:`PRIOR_RATE` before any).

        Little's law: as many as are in progress (at least ``slots``: what
        a server with slots free could run) per mean duration.
        """
        return max(self.load, self.slots) / self.duration if self.measured else PRIOR_RATE

    @property
    def trusted(self) -> bool:
        """The rate was measured over more than a round of completions (the first round's are its shortest)."""
        return self.measured > self.slots

    def completed(self, duration: float, in_progress: int) -> None:
        """A slot held ``duration`` s is free, with ``in_progress`` handshakes (its own included) holding slots.

        Its handshake completed or failed, or its client went silent: every
        slot freed counts, or slots stuck on abandoned handshakes would make
        the rest look fast.
        """
        self._quiet = in_progress < self.slots
        if self._quiet:
            self._since = None  # a slot was free: the server is not refusing
        self.measured = min(self.slots + 1, self.measured + 1)
        weight = max(_WEIGHT, 1 / self.measured)  # the first replaces nothing assumed; then a running mean
        self.duration += weight * (max(duration, 1e-6) - self.duration)
        self.load += weight * (in_progress - self.load)

    def admits(self, now: float, in_progress: int, token: bytes) -> Admitted | Refused:
        """An Initial arrived with ``in_progress`` handshakes holding slots, carrying QUIC ``token``."""
        self._advance(now)
        turn = self._turn(token)
        if in_progress < self.slots:
            return Admitted()
        if self._since is None:  # refusing starts (again)
            self._since = now
            if self._quiet and now - self._refused_at >= QUIET_SPELL:
                self.measured = 0  # a quiet server's figures say nothing of a storm: the prior, then its own
        self._refused_at = now
        self.paced_at = self.capacity
        if turn is None:  # a newcomer: the end of the queue
            self.issued += 1
            return Refused(self._window(self.issued - 1))
        if turn > self.head:  # early: told again when its turn comes (the queue does not grow)
            return Refused(self._window(turn))
        if in_progress < 2 * self.slots:  # its turn has come: the server's promise
            return Admitted()
        self.head = max(0.0, self.head - 1)  # a promise not kept: every later turn comes one place later
        return Refused(self._window(turn, behind=True))

    def _advance(self, now: float) -> None:
        """Call the turns the server had capacity for since the last event (never beyond those given)."""
        self.head = min(float(self.issued), self.head + (now - self._at) * self.capacity)
        self._at = now

    def _turn(self, token: bytes) -> int | None:
        """The turn ``token`` names, if it is one of this queue's."""
        if len(token) != _TICKET.size:
            return None
        queue, turn = _TICKET.unpack(token)
        return turn if queue == self._queue and turn < self.issued else None

    def _window(self, turn: int, behind: bool = False) -> RetryWindow:
        """When ``turn`` comes, as a window from now, naming the turn.

        ``behind``: the turn has come but the server is at twice its bound
        (it completes fewer than the estimate said): within one round.
        """
        ticket = _TICKET.pack(self._queue, turn)
        if behind:
            return RetryWindow(0.0, min(MAX_WINDOW, max(MIN_WINDOW, self.slots / self.capacity)), ticket)
        start = max(0.0, turn - self.head) / self.capacity  # when head reaches it: called
        farthest = MAX_WINDOW
        if not self.trusted:  # no rate measured yet: ask again once the server has waited as long again
            assert self._since is not None
            farthest = min(MAX_WINDOW, max(PROBE_WINDOW, 2 * (self._at - self._since)))
        width = min(max(MIN_WINDOW, 1.0 / self.capacity), farthest / 2)  # one turn's time, within reason
        if start + width > farthest:  # beyond what may be promised: ask again, spread over the second half
            spread = (turn % 1024) / 1024 * max(0.0, farthest / 2 - width)
            return RetryWindow(farthest / 2 + spread, farthest / 2 + spread + width, ticket)
        return RetryWindow(start, start + width, ticket)


__all__ = [
    "MAX_WINDOW",
    "MIN_WINDOW",
    "HandshakeAdmission",
    "Admitted",
    "Refused",
    "RetryWindow",
    "busy_reason",
    "retry_window",
    "retry_within",
    "window_named",
]
