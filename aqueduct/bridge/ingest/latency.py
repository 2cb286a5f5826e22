"""A fixed-bucket latency histogram the bridge keeps without any metrics library.

The ingest times every group commit into one; the metrics endpoint
(:mod:`aqueduct.bridge.app.metrics`) reads it at scrape time. Keeping the
counts here, rather than in a ``prometheus_client.Histogram``, leaves the
ingest free of an optional dependency and costs one ``bisect`` per group
commit, not per record.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

#: upper bounds in seconds: an fsync takes from ~50 µs (tmpfs) to tens of ms (a busy disk)
COMMIT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


@dataclass
class Histogram:
    """Counts of observations per bucket (the last one: above every bound), their sum and number."""

    bounds: tuple[float, ...] = COMMIT_BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    observations: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.total += seconds
        self.observations += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """``(upper bound, observations at or below it)`` pairs, ending with ``+Inf``, as Prometheus wants."""
        out, running = [], 0
        for bound, count in zip([*map(str, self.bounds), "+Inf"], self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out
