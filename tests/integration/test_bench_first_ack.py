"""``bench.first_ack`` reads a cold start's milestones from the bridge's JSON lines, and explains itself.

The benchmark itself starts Spark (run it alone, under the heavy lock);
these checks need no JVM.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.first_ack import BridgeLines, summary


def line(message: str, **fields: object) -> bytes:
    return json.dumps({"time": "2026-11-27T10:00:00.000+00:00", "level": "INFO", "message": message, **fields}).encode()


def test_the_milestones_come_from_the_bridges_own_lines() -> None:
    lines = BridgeLines(spawned=0.0)
    lines.seen(line("log L, starting Spark (local[*])", event="starting"))
    lines.seen(b"26/11/27 10:00:01 WARN NativeCodeLoader: Unable to load native-hadoop library")  # the JVM's
    lines.seen(line("listening on QUIC 127.0.0.1:4433", event="listening"))
    lines.seen(line("sessions 0", event="status", durable_records=0, batches=0))
    lines.seen(line("session started: p from quic", event="session_started"))
    lines.seen(line("sessions 1", event="status", durable_records=2, batches=0))
    lines.seen(line("query aqueduct-bridge running", event="query_running", session_s=6.0, query_s=1.5))
    lines.seen(line("sessions 1", event="status", durable_records=2, batches=1))
    assert list(lines.at) == [
        "starting", "listening", "session", "durable", "query_running", "spark_ready", "spark_start", "first_batch"
    ]  # fmt: skip
    assert lines.at["query_running"] - lines.at["spark_ready"] == pytest.approx(1.5)  # the query's start
    assert lines.at["spark_ready"] - lines.at["spark_start"] == pytest.approx(6.0)  # the session's start


def test_the_summary_takes_the_median_of_each_milestone_every_start_reached() -> None:
    starts = [{"listening": 10.0, "first_ack": 12.0}, {"listening": 8.0, "first_ack": 9.0, "session": 8.5},
              {"listening": 9.0, "first_ack": 11.0}]  # fmt: skip
    assert summary(starts)["median_s"] == {"listening": 9.0, "first_ack": 11.0}


def test_the_benchmark_explains_itself() -> None:
    done = subprocess.run([sys.executable, "-m", "bench.first_ack", "--help"], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    assert "cold" in done.stdout and "restart" in done.stdout and "--repeat" in done.stdout
