"""A Spark stand-in for tests without Spark: micro-batches of complete epochs, committed through a commit file.

What a query over the log does, as the bridge sees it: each micro-batch
ends at every stream's last complete epoch, and the source's commit writes
the consumer's commit file (``<log>/commits/<consumer>.json``), which the
bridge reads (its safety net) to ack producers and truncate. The real
source's file trails the query by one micro-batch; ``trails`` sets how
many here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from aqueduct.bridge.source.log_access import LocalLog


def complete_epochs(log_dir: Path) -> dict[int, int]:
    """Every stream's end of its last complete epoch, read as a reader in another process reads it."""
    return {sid: index.complete for sid, index in LocalLog(log_dir).snapshots().load().items()}


class SparkStandIn:
    """Commits micro-batches as ``consumer`` through its commit file, ``trails`` batches behind."""

    def __init__(self, log_dir: Path, consumer: str, trails: int = 0) -> None:
        self.local = LocalLog(log_dir)
        self.consumer = consumer
        self.trails = trails
        self.batches: list[dict[int, int]] = []  # the micro-batches committed, newest last (the last trails + 1)

    def commit(self, positions: Mapping[int, int]) -> bool:
        """A micro-batch ending at ``positions`` if they hold new records; say whether it was one."""
        if self.batches and dict(positions) == self.batches[-1]:
            return False
        self.batches = [*self.batches[-self.trails :], dict(positions)] if self.trails else [dict(positions)]
        if len(self.batches) > self.trails:
            self.local.commit(self.consumer, self.batches[-1 - self.trails], 0)
        return True
