"""Operator signals over real HTTP: stalled producers, and alert rules naming only series the bridge serves.

A producer whose records wait for a commit counts as stalled, then not
once acked. The alert rules of ``docs/prometheus-alerts.json`` parse and
query only series a running bridge exports. A real bridge without Spark (log, ingest, TCP listener, consumer
positions, metrics endpoint); its ack-driving consumer commits only when
the test says so, as Spark's listener would report it. Producers are
connector clients over loopback.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aqueduct.bridge.app.service import Bridge, BridgeConfig
from aqueduct.connector.producer.client import Connector
from tests.ingest_only_bridge import bridge_without_spark
from tests.integration.test_bridge_metrics_logs import scrape

TIMEOUT = 30.0  # only turns a hang into a failure
STALLED_AFTER = 0.5  # short, so the test's wait for the stall is short
ALERTS = Path(__file__).resolve().parents[2] / "docs" / "prometheus-alerts.json"
DURATION = re.compile(r"^\d+[smhd]$")


@pytest.fixture
async def bridge(tmp_path: Path) -> AsyncIterator[Bridge]:
    config = BridgeConfig(
        log_dir=tmp_path / "log", tcp=("127.0.0.1", 0), metrics=("127.0.0.1", 0), stalled_after=STALLED_AFTER
    )
    async with bridge_without_spark(config) as b:
        yield b


async def gauge(b: Bridge, name: str) -> float:
    """One unlabelled gauge's value, read from /metrics over HTTP."""
    return (await scrape(b))[(name, ())]


async def test_a_producer_whose_records_wait_for_the_sink_counts_as_stalled_until_acked(bridge: Bridge) -> None:
    assert bridge.tcp_address is not None and bridge.ingest is not None and bridge.positions is not None
    ingest = bridge.ingest
    url = f"tcp://127.0.0.1:{bridge.tcp_address[1]}"
    async with (
        Connector(url, program="shop", instance="waiting") as waiting,
        Connector(url, program="shop", instance="idle") as idle,
    ):
        await idle.stream(2, "quiet")  # connected, nothing unacked: never stalled
        s = await waiting.stream(1, "orders")
        await s.send_many([b"order"] * 20)
        for _ in range(int(TIMEOUT / 0.05)):  # the records durable, then older than the threshold
            if await gauge(bridge, "aqueduct_stalled_producers") == 1:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the waiting producer never counted as stalled")
        assert waiting.unacked == 20 and idle.unacked == 0

        bridge.positions.on_committed("reports", ingest.complete_offsets())  # as Spark's listener would
        assert await waiting.flush(TIMEOUT) == 0  # the ACK reached it
        assert await gauge(bridge, "aqueduct_stalled_producers") == 0
        assert await gauge(bridge, "aqueduct_log_disk_full") == 0


async def test_every_alert_rule_is_complete_and_queries_only_series_the_bridge_serves(bridge: Bridge) -> None:
    doc = json.loads(ALERTS.read_text())  # Prometheus reads rule files as YAML, JSON included
    rules = [rule for group in doc["groups"] for rule in group["rules"]]
    assert [group["name"] for group in doc["groups"]] == ["aqueduct"]
    served = {name for name, _ in await scrape(bridge)}
    queried = set()
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in ("warning", "critical") and rule["annotations"]["summary"], rule
        assert DURATION.match(rule.get("for", "0s")), rule
        assert rule["expr"].count("(") == rule["expr"].count(")"), rule
        queried |= set(re.findall(r"aqueduct_[a-z_]+", rule["expr"]))
    assert {"aqueduct_log_disk_full", "aqueduct_stalled_producers"} <= queried
    assert queried <= served, queried - served
    assert len({rule["alert"] for rule in rules}) == len(rules)
