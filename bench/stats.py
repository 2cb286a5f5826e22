"""Summaries of repeated measurements: median and spread, never a single best run."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    """Median of the repetitions plus their range; ``spread`` is (max - min) / median."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else 0.0

    @property
    def low(self) -> float:
        return min(self.values) if self.values else 0.0

    @property
    def high(self) -> float:
        return max(self.values) if self.values else 0.0

    @property
    def spread(self) -> float:
        m = self.median
        return (self.high - self.low) / m if m else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "values": list(self.values),
            "median": self.median,
            "min": self.low,
            "max": self.high,
            "spread": self.spread,
        }


def ratio(ours: Summary, baseline: Summary) -> float | None:
    """ours / baseline of the medians (None when the baseline measured nothing)."""
    return ours.median / baseline.median if baseline.median else None


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]
