"""What the ingest is told: its flow-control policy.

A module of its own because every room of the ingest reads it (the
group-commit writer its pacing, the credits their bounds) and the
application builds it from the bridge's options.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IngestConfig:
    """Flow-control policy of the ingest service."""

    max_lag: int = 200_000  # records Spark may lag behind before credits stop for producers over their fair share (all of them at twice this)
    group_commit_delay: float = 0.002  # seconds to gather a group before its group commit
    #: seconds from one group commit's start to the next one's at the least. Spark writes its
    #: Parquet files and checkpoint to the same disks: a paced producer otherwise gets a group
    #: commit (an fsync or more) every few ms, and at hundreds of fsyncs a second Spark's
    #: micro-batch took 2.3x as long (docs/performance.md, issue 29). A record arriving after
    #: a quiet spell still waits only ``group_commit_delay``.
    group_commit_interval: float = 0.02
    #: credits all sessions may hold together (None: each session has its own,
    #: unbounded in total); see :mod:`aqueduct.bridge.ingest.credit_budget`
    credit_budget: int | None = None
    session_credits: int = 4096  # under a budget: the most one session may hold
    #: bytes of records (payload and key) all sessions may have in flight together,
    #: turned into credits by the recent mean record size (None: no byte bound);
    #: with ``credit_budget`` too, the smaller of the two applies
    memory_budget: int | None = None

    @property
    def shares_credits(self) -> bool:
        """Sessions draw their credits from one pool (start with none of their own)."""
        return self.credit_budget is not None or self.memory_budget is not None
