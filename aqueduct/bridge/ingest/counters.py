"""The ingest's running totals, for progress lines, the metrics endpoint and tests.

One dataclass that every room of the ingest adds to (sessions, the
group-commit writer, the acks): the metrics scrape copies it whole on the
loop thread, so it stays one plain object rather than a count per room.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from aqueduct.bridge.ingest.latency import Histogram


@dataclass
class IngestCounters:
    """Totals since start, for progress lines, the metrics endpoint and tests."""

    messages: int = 0  # data records appended (boundaries excluded)
    duplicates: int = 0  # dropped by the log's range set (the session drops others itself)
    withheld_credits: int = 0  # credits currently held back by the backlog bound
    sessions: int = 0  # live sessions
    sessions_started: int = 0  # handshakes completed
    #: sessions ended by an ERROR (the bridge's refusals and the connectors' own), by ``refusal_kind``
    refusals: Counter[str] = field(default_factory=Counter)
    durable_bytes: int = 0  # payload and key bytes of the records group commits made durable
    credits_granted: int = 0  # credits sent with OK (unless shared) and after group commits
    group_commit_seconds: Histogram = field(default_factory=Histogram)  # group commits, writes and fsyncs
