"""/metrics counts the QUIC handshakes a bridge completed, full or resumed: a reconnect resumes its TLS session.

A real bridge without Spark, scraped over HTTP; the producer is a connector
client over loopback that connects twice (the second time with the ticket
the first connection was issued).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aqueduct.bridge.app.service import Bridge, BridgeConfig
from aqueduct.connector.producer.client import Connector
from tests.ingest_only_bridge import bridge_without_spark
from tests.integration.test_bridge_metrics_logs import quic_url, scrape


@pytest.fixture
async def bridge(tmp_path: Path) -> AsyncIterator[Bridge]:
    config = BridgeConfig(log_dir=tmp_path / "log", quic=("127.0.0.1", 0), metrics=("127.0.0.1", 0))
    async with bridge_without_spark(config) as b:
        yield b


def completed(metrics: dict, kind: str) -> float:  # noqa: ANN001 - scrape's samples
    return metrics[("aqueduct_quic_handshakes_completed_total", (("kind", kind),))]


async def test_metrics_count_full_and_resumed_quic_handshakes(bridge: Bridge) -> None:
    before = await scrape(bridge)
    assert completed(before, "full") == completed(before, "resumed") == 0  # present before any
    for _ in range(2):
        async with Connector(quic_url(bridge), program="p", instance="0", cafile=str(bridge.cafile)) as producer:
            assert producer.connected  # its session began: its QUIC handshake completed
    after = await scrape(bridge)
    assert completed(after, "full") == 1
    assert completed(after, "resumed") == 1
