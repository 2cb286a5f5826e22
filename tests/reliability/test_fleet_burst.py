"""A fleet of 1,000 QUIC producers connects to one ingest in one burst; nothing is lost.

The committed fleet benchmark (``bench.fleet``) in a small configuration:
a bridge process (the real connector listener, ingest and durable log) and
1,000 ``Connector`` producers as asyncio tasks in two processes, released
together, each sending a few paced messages. Every producer must get a
session (handshakes beyond the server's bound are refused and retried by
the producers' backoff) and the log must hold every message exactly once.
The timeouts only prevent hangs; nothing here depends on speed.
"""

from __future__ import annotations

import asyncio

from bench.fleet import build_parser, main_async
from tests.reliability.faults import Figures

PRODUCERS = 1000
MESSAGES = 3
HANG_GUARD = 600.0  # seconds; a healthy run takes well under a minute


async def test_a_thousand_quic_producers_in_one_burst_all_connect_exactly_once(figures: Figures) -> None:
    args = build_parser().parse_args([
        "--producers", str(PRODUCERS), "--transports", "quic", "--messages", str(MESSAGES),
        "--rate", "10", "--procs", "2", "--limit", str(HANG_GUARD / 2), "--quiet",
    ])
    (result,) = await asyncio.wait_for(main_async(args), HANG_GUARD)
    figures.sent = PRODUCERS * MESSAGES
    figures.in_sink = result["records"]
    figures.lost = figures.sent - result["records"]
    figures.extra = {
        k: result[k]
        for k in ("connected", "failed", "retries", "handshakes_per_s", "lag_p99_s", "rss_idle_mb", "rss_per_session_kb")
    }
    assert result["errors"] == []
    assert (result["connected"], result["failed"], result["acked_producers"]) == (PRODUCERS, 0, PRODUCERS)
    assert result["streams"] == PRODUCERS and result["records"] == PRODUCERS * MESSAGES
    assert result["exactly_once_bad_count"] == 0 and result["exactly_once"]
