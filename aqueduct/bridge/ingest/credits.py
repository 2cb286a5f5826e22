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

Bookkeeping only: nothing here is sent. The acks room
(:mod:`~aqueduct.bridge.ingest.acks`) visits :meth:`Credits.concerned`
sessions and sends what :meth:`Credits.take` gives it, in the same ACK
frame as their points of reference.
"""

from __future__ import annotations

from collections.abc import Mapping

from aqueduct.bridge.ingest.backlog import Backlog
from aqueduct.bridge.ingest.config import IngestConfig
from aqueduct.bridge.ingest.counters import IngestCounters
from aqueduct.bridge.ingest.credit_budget import CreditBudget, RecordSize
from aqueduct.bridge.ingest.fair_share import OwnBacklog, may_grant
from aqueduct.connector.worker.server import WorkerPeer


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

    def joined(self, peer: WorkerPeer, credits: int) -> int:
        """A session started with ``credits`` (its OK's); return more to grant it now (under a budget)."""
        self._withheld[peer] = 0
        return self.budget.join(peer, credits) if self.budget is not None else 0

    def left(self, peer: WorkerPeer) -> None:
        """The session ended: whatever it held returns to the budget."""
        self._withheld.pop(peer, None)
        self._owed.discard(peer)
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

    def _may_send(self, peer: WorkerPeer) -> bool:
        """May ``peer`` have its credits: the backlog under ``max_lag``, or its own under its fair share."""
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
