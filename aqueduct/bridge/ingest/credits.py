"""What each session may send next: credits earned, withheld, and shared under a budget.

* **Credits only for durable data.** A session gets back the credits it
  spent once the group commit holding its records is done
  (:meth:`Credits.made_durable`), so the bytes a producer can have in the
  bridge's memory are bounded by its credits.
* **Backlog bound.** While the :class:`~aqueduct.bridge.ingest.backlog.Backlog`
  exceeds ``max_lag``, credits earned are withheld from the sessions whose
  own backlog is over their fair share (:mod:`~aqueduct.bridge.ingest.fair_share`:
  a producer that just moved here can still resend what a failover query
  waits for); they are released as Spark commits and the backlog shrinks.
* **A shared budget.** With ``credit_budget`` or ``memory_budget`` every
  credit comes from one :class:`~aqueduct.bridge.ingest.credit_budget.CreditBudget`,
  the byte budget turned into records by the mean record size.
* **The fleet back first.** A session that starts while a listener
  refuses producers as busy (a reconnect storm: :attr:`Credits.storming`)
  gets :data:`STORM_CREDITS` of what it is owed, and what it earns back is
  held, until the refusals stop or :data:`STORM_HOLD` seconds have passed
  (:meth:`Credits.release_storm`, which the ingest asks every
  :data:`STORM_POLL`). On an aioquic bridge a producer's record costs a
  third of its handshake (2 ms of CPU against 6-7): in a restart the
  producers already back, sending at their pace, took the CPU the others'
  handshakes needed, and the last of 2,000 was back after 205 s
  (docs/performance.md, "When the last producer is back"). Here each
  newcomer sends its first records, is acked (it is back), and waits
  while the others connect. Sessions that started before the storm are
  not held: a storm never stops the producers already served. Only
  sessions whose OK granted nothing of their own can be held (the ingest
  grants their first credits, as under a budget): the QUIC listener's.

Bookkeeping only: nothing here is sent. The acks room
(:mod:`~aqueduct.bridge.ingest.acks`) visits :meth:`Credits.concerned`
sessions and sends what :meth:`Credits.take` gives it, in the same ACK
frame as their points of reference.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aqueduct.bridge.ingest.backlog import Backlog
from aqueduct.bridge.ingest.config import IngestConfig
from aqueduct.bridge.ingest.counters import IngestCounters
from aqueduct.bridge.ingest.credit_budget import CreditBudget, RecordSize
from aqueduct.bridge.ingest.fair_share import OwnBacklog, may_grant
from aqueduct.connector.worker.server import WorkerPeer

STORM_CREDITS = 2
"""Credits a session that starts during a storm gets before the storm is over: its first records, acked."""
STORM_POLL = 0.25
"""Seconds between the ingest's looks at whether a storm that held credits back is over."""
STORM_HOLD = 60.0
"""The longest a session that started in a storm waits for the rest of its credits, storm or not (a
bridge refusing producers for good, overloaded, must still serve the ones it took)."""


def _calm() -> bool:
    return False


class Credits:
    """Credits earned and not yet sent, per open session; the shared budget if there is one."""

    def __init__(self, config: IngestConfig, backlog: Backlog, counters: IngestCounters) -> None:
        self.config = config
        self._backlog = backlog
        self.counters = counters
        self._withheld: dict[WorkerPeer, int] = {}  # credits earned but held back (or not sent yet)
        #: sessions holding earned credits not yet sent (the tap was closed, or nothing went out yet)
        self._owed: set[WorkerPeer] = set()
        #: mean record size, for turning ``memory_budget`` into credits
        self._record_size = RecordSize()
        self.budget = (
            CreditBudget(self._budget_records(), self.config.session_credits) if self.config.shares_credits else None
        )
        #: whether producers are being refused as busy now (set by the application from its listeners)
        self.storming: Callable[[], bool] = _calm
        #: sessions that started in a storm, held to their first credits, and since when (monotonic seconds)
        self._storm_held: dict[WorkerPeer, float] = {}

    def joined(self, peer: WorkerPeer, credits: int, now: float) -> int:
        """A session started at ``now`` with ``credits`` (its OK's); return more to grant it now.

        Under a budget, the budget's start; otherwise ``session_credits`` if
        the listener's OK granted none, or nothing (the OK's are the
        session's). During a storm, at most :data:`STORM_CREDITS` of it now,
        the rest once :meth:`release_storm` lets it go.
        """
        self._withheld[peer] = 0
        if self.budget is not None:
            grant = self.budget.join(peer, credits)
        else:
            grant = 0 if credits else self.config.session_credits
        if grant > STORM_CREDITS and self.storming():
            self._withheld[peer] = grant - STORM_CREDITS
            self._owed.add(peer)
            self._storm_held[peer] = now
            self.counters.storm_held_sessions += 1
            grant = STORM_CREDITS
        return grant

    def left(self, peer: WorkerPeer) -> None:
        """The session ended: whatever it held returns to the budget."""
        self._withheld.pop(peer, None)
        self._owed.discard(peer)
        self._storm_held.pop(peer, None)
        if self.budget is not None:
            self.budget.leave(peer)

    def made_durable(self, earned: Mapping[WorkerPeer, int], nbytes: int) -> None:
        """A group commit of ``nbytes`` made durable the records each session spent ``earned`` credits on."""
        if self.budget is not None and self.config.memory_budget is not None:
            self._record_size.made_durable(sum(earned.values()), nbytes)
            self.budget.resize(self._budget_records())
        for peer, n in earned.items():
            if peer in self._withheld:  # else the session ended meanwhile
                self._withheld[peer] += n if self.budget is None else self.budget.earned(peer, n)
                if self._withheld[peer]:
                    self._owed.add(peer)

    def concerned(self) -> set[WorkerPeer]:
        """Sessions that may have credits to receive: those owed some, those a budget cut short."""
        concerned = set(self._owed)
        if self.budget is not None:
            concerned |= self.budget.short
        return concerned

    def take(self, peer: WorkerPeer) -> int | None:
        """Credits to send ``peer`` now (0 while the backlog is too long for it); None for a session gone."""
        if peer not in self._withheld:
            return None
        if self.budget is not None:
            self._withheld[peer] += self.budget.top_up(peer)
        credits = self._withheld[peer] if self._may_send(peer) else 0
        self._withheld[peer] -= credits
        if self._withheld[peer]:
            self._owed.add(peer)
        else:
            self._owed.discard(peer)
        return credits

    def release_storm(self, now: float) -> bool:
        """Let go the sessions held since a storm that is over, or for :data:`STORM_HOLD`; whether any was.

        The acks room should then visit them (nothing else would: they wait
        for these credits to send anything).
        """
        if not self._storm_held:
            return False
        if not self.storming():
            self._storm_held.clear()
            return True
        waited = [peer for peer, since in self._storm_held.items() if now - since >= STORM_HOLD]
        for peer in waited:
            del self._storm_held[peer]
        return bool(waited)

    def _may_send(self, peer: WorkerPeer) -> bool:
        """May ``peer`` have its credits: not held for a storm, and the backlog under ``max_lag`` or its own under its fair share."""
        if peer in self._storm_held:
            return False
        lag, max_lag = self._backlog.lag, self.config.max_lag
        if lag <= max_lag:
            return True  # the common case: no per-stream sums
        own = [self._backlog.lag_of(sid) for sid in peer.session.streams]
        mine = OwnBacklog(sum(own), len(own), sum(1 for n in own if n))
        return may_grant(lag, max_lag, mine, self._backlog.lagging)

    def count_withheld(self) -> None:
        """Update the counter of credits held back (after the sessions concerned were visited)."""
        self.counters.withheld_credits = sum(self._withheld[p] for p in self._owed)

    def _budget_records(self) -> int:
        """Credits the shared pool holds: ``credit_budget``, or fewer if ``memory_budget`` says so."""
        limits = [self.config.credit_budget] if self.config.credit_budget is not None else []
        if self.config.memory_budget is not None:
            limits.append(self._record_size.records_in(self.config.memory_budget))
        return min(limits)
