"""One credit budget shared by every connector session of a bridge.

A credit lets a producer put one frame in flight, i.e. in the bridge's
memory until the group commit that makes it durable. Credits granted per
session alone would let 10,000 sessions hold 10,000 x credits; here the
credits all sessions hold together (granted and not yet earned back by a
commit) come from one budget of ``total`` records, so memory is bounded by
configuration, not by the number of producers.

Sessions start small (``start`` credits) and grow, by getting back more
than they spent, up to their fair share: ``min(per_session, total //
sessions)``. A session above its share (the share shrinks as sessions
join) gets back less than it spent until it is at its share again, so the
surplus flows to the sessions that are below theirs. A session never
waits with no credit at all: one that holds none gets one even when the
pool is empty (so every producer keeps moving, and the budget may be
exceeded by at most one credit per session).

A budget in bytes (the bridge's ``memory_budget``) becomes a budget in
records through the size of the records actually arriving:
:class:`RecordSize` follows the mean size of recent group commits and the
ingest :meth:`~CreditBudget.resize` s the pool after each one, so the
bytes in flight follow the configured amount as long as record sizes are
steady. Records growing larger overshoot it for one round at most (the
credits already granted), each bounded by the session's maximum frame size.

Pure bookkeeping (no I/O): the ingest calls :meth:`join`, :meth:`earned`,
:meth:`top_up`, :meth:`leave` and :meth:`resize` and sends what they return.
"""

from __future__ import annotations

from collections.abc import Hashable

START_CREDITS = 64
"""Credits a new session gets before it has shown it uses them."""

ASSUMED_RECORD_BYTES = 1024
"""Record size a byte budget assumes before the first group commit has shown the real one."""

_SMOOTHING = 0.25  # weight of the newest group commit in the mean record size


class CreditBudget:
    """Credits held by sessions (keys), drawn from one pool of ``total``."""

    def __init__(self, total: int, per_session: int, start: int = START_CREDITS) -> None:
        if total < 1 or per_session < 1:
            raise ValueError(f"credit budget and per-session credits must be positive, got {total} and {per_session}")
        self.total = total
        self.per_session = per_session
        self.start = max(1, min(start, per_session))
        self.held: dict[Hashable, int] = {}  # granted and not yet earned back
        self.free = total
        #: sessions whose last grant the empty pool cut short: the ones a top-up may help
        self.short: set[Hashable] = set()

    @property
    def share(self) -> int:
        """What each session may hold now: the budget split evenly, capped per session."""
        return max(1, min(self.per_session, self.total // max(1, len(self.held))))

    def join(self, key: Hashable, already: int = 0) -> int:
        """A session starts holding ``already`` credits (its OK's); return more to grant it now."""
        self.held[key] = already
        self.free -= already
        return self._grant(key, min(self.start, self.share) - already)

    def earned(self, key: Hashable, spent: int) -> int:
        """``spent`` credits of ``key`` became durable: back to the pool; return what to grant it.

        A session that used its credits may double them, up to its share.
        """
        before = self.held[key]
        self.held[key] = before - spent
        self.free += spent
        return self._grant(key, min(self.share, max(self.start, 2 * before)) - self.held[key])

    def top_up(self, key: Hashable) -> int:
        """Credits to grant ``key`` now if it holds less than a new session would get."""
        return self._grant(key, min(self.start, self.share) - self.held[key])

    def resize(self, total: int) -> None:
        """Change the pool's size (credits held stay held; a smaller pool grants less until they return)."""
        if total < 1:
            raise ValueError(f"credit budget must be positive, got {total}")
        self.free += total - self.total
        self.total = total

    def leave(self, key: Hashable) -> None:
        """The session ended: whatever it held returns to the pool."""
        self.free += self.held.pop(key, 0)
        self.short.discard(key)

    def _grant(self, key: Hashable, want: int) -> int:
        held = self.held[key]
        grant = max(0, min(want, self.free))
        if grant < want:
            self.short.add(key)
        else:
            self.short.discard(key)
        if held + grant == 0 and want > 0:
            grant = 1  # never leave a session with nothing to send on
        self.held[key] = held + grant
        self.free -= grant
        return grant


class RecordSize:
    """Mean bytes per record (payload and key) over recent group commits, for a byte budget."""

    def __init__(self, assumed: int = ASSUMED_RECORD_BYTES) -> None:
        self.mean = float(assumed)

    def made_durable(self, records: int, nbytes: int) -> None:
        """A group commit made ``records`` records of ``nbytes`` bytes durable."""
        if records:
            self.mean += _SMOOTHING * (nbytes / records - self.mean)

    def records_in(self, budget_bytes: int) -> int:
        """How many records of the current mean size ``budget_bytes`` holds (at least one)."""
        return max(1, int(budget_bytes // max(1.0, self.mean)))
