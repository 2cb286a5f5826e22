"""What an operator watches: the bridge's /metrics over real HTTP, and its log lines for sessions and refusals.

A real bridge (log, ingest, TCP and QUIC listeners, consumer positions)
without Spark: the test reports a consumer's commit as Spark's listener
would. Producers are connector clients over loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from aqueduct.bridge.app.service import Bridge, BridgeConfig
from aqueduct.connector.errors import ConnectorRefused, TlsRefused
from aqueduct.connector.producer.client import Connector
from aqueduct.runtime.certs import generate_certs
from tests.ingest_only_bridge import bridge_without_spark

TIMEOUT = 30.0  # only turns a hang into a failure
DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


@pytest.fixture
async def bridge(tmp_path: Path) -> AsyncIterator[Bridge]:
    config = BridgeConfig(
        log_dir=tmp_path / "log", tcp=("127.0.0.1", 0), quic=("127.0.0.1", 0), cookie=b"secret",
        metrics=("127.0.0.1", 0),
    )  # fmt: skip
    async with bridge_without_spark(config) as b:
        yield b


def tcp_url(b: Bridge) -> str:
    assert b.tcp_address is not None
    return f"tcp://127.0.0.1:{b.tcp_address[1]}"


def quic_url(b: Bridge) -> str:
    assert b.quic_address is not None
    return f"aqueduct://127.0.0.1:{b.quic_address[1]}"


async def scrape(b: Bridge) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics; every sample as {(name, sorted labels): value}."""
    assert b.metrics is not None
    host, port = b.metrics.address

    def get() -> tuple[str, str]:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=TIMEOUT) as response:
            return response.headers["Content-Type"], response.read().decode()

    content_type, text = await asyncio.to_thread(get)
    assert content_type.startswith("text/plain; version=0.0.4")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def until(predicate, what: str) -> None:  # noqa: ANN001 - a test helper
    for _ in range(int(TIMEOUT / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_metrics_answer_while_producers_run(bridge: Bridge) -> None:
    assert bridge.cafile is not None and bridge.ingest is not None and bridge.positions is not None
    ingest = bridge.ingest
    async with (
        Connector(tcp_url(bridge), program="tcp", instance="0", cookie="secret") as a,
        Connector(quic_url(bridge), program="quic", instance="0", cookie="secret", cafile=str(bridge.cafile)) as b,
    ):
        sa, sb = await a.stream(1, "a"), await b.stream(2, "b")
        sending = time.monotonic()
        await sa.send_many([b"x" * 10] * 60)
        for _ in range(40):
            await sb.send(b"y" * 10)
        await until(lambda: ingest.counters.messages == 100 and not ingest.buffered, "100 durable records")
        live = await scrape(bridge)
        assert live[("aqueduct_sessions", ())] == 2
        assert live[("aqueduct_sessions_started_total", ())] == 2
        assert live[("aqueduct_records_received_total", ())] == 100
        assert live[("aqueduct_records_durable_total", ())] == 100
        assert live[("aqueduct_durable_bytes_total", ())] == 1000
        assert live[("aqueduct_records_acked_total", ())] == 0
        assert live[("aqueduct_consumer_lag_records", (("consumer", "reports"),))] == 100
        age = live[("aqueduct_consumer_oldest_unread_age_seconds", (("consumer", "reports"),))]
        assert 0 <= age <= time.monotonic() - sending  # the oldest unread record is one of those just sent
        assert live[("aqueduct_group_commit_seconds_count", ())] >= 1
        assert live[("aqueduct_credits_granted_total", ())] >= 2 * 100
        assert live[("aqueduct_log_disk_bytes", ())] > 0
        assert ("process_resident_memory_bytes", ()) in live

        bridge.positions.on_committed("reports", ingest.complete_offsets())  # as Spark's listener would
        assert await a.flush(TIMEOUT) == 0 and await b.flush(TIMEOUT) == 0
        with pytest.raises(ConnectorRefused, match="^bad cookie$"):
            await Connector(tcp_url(bridge), cookie="wrong", connect_timeout=TIMEOUT).connect()
        after = await scrape(bridge)
    assert after[("aqueduct_records_acked_total", ())] == 100
    assert after[("aqueduct_consumer_committed_records_total", (("consumer", "reports"),))] == 100
    assert after[("aqueduct_consumer_lag_records", (("consumer", "reports"),))] == 0
    assert after[("aqueduct_consumer_oldest_unread_age_seconds", (("consumer", "reports"),))] == 0
    assert after[("aqueduct_refusals_total", (("reason", "bad_cookie"),))] == 1
    assert after[("aqueduct_refusals_total", (("reason", "stream_owner"),))] == 0
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"aqueduct_[a-z_]+", target["expr"])
    }
    assert len(queried) >= 10 and queried <= {name for name, _ in after}  # every series it draws exists


async def test_refused_producers_show_in_the_log_with_their_reason(
    bridge: Bridge, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aqueduct")
    url = tcp_url(bridge)
    async with Connector(url, program="owner", instance="0", cookie="secret") as owner:
        await (await owner.stream(3, "taken")).send(b"mine")
        assert await owner.flush(0) <= 1
    with pytest.raises(ConnectorRefused, match="^bad cookie$"):
        await Connector(url, program="shop", instance="7", cookie="guess", connect_timeout=TIMEOUT).connect()
    intruder = Connector(url, program="other", instance="0", cookie="secret")
    await intruder.connect()
    try:
        stream = await intruder.stream(3, "taken")
        with contextlib.suppress(ConnectorRefused):  # the refusal may come back before the send
            await stream.send(b"theirs")
        with pytest.raises(ConnectorRefused):
            await intruder.flush(TIMEOUT)
    finally:
        await intruder.close()
    _, writer = await asyncio.open_connection(*bridge.tcp_address)  # type: ignore[misc]
    writer.write(b"\x00\x00\x00\x01Z")  # a frame with an unknown tag
    await writer.drain()
    wrong = generate_certs(tmp_path / "wrong")
    with pytest.raises(TlsRefused):
        await Connector(quic_url(bridge), cookie="secret", cafile=str(wrong.ca), connect_timeout=TIMEOUT).connect()
    await until(lambda: sum("failed" in r.getMessage() for r in caplog.records) >= 1
                and sum("unknown frame tag" in r.getMessage() for r in caplog.records) >= 1, "the last refusals")  # fmt: skip
    writer.close()

    lines = [(r.levelname, r.name, r.getMessage()) for r in caplog.records if r.name.startswith("aqueduct")]
    remote = r"tcp 127\.0\.0\.1:\d+"
    expected = [
        ("INFO", "aqueduct.bridge.ingest.service", rf"^session started: owner/0 from {remote}, 0 stream\(s\) to resume$"),
        ("INFO", "aqueduct.bridge.ingest.service", rf"^session ended: owner/0 from {remote}: connection closed$"),
        ("WARNING", "aqueduct.bridge.ingest.service", rf"^refused shop/7 from {remote}: bad cookie$"),
        ("WARNING", "aqueduct.bridge.ingest.service",
         rf"^refused stream 3 of other/0 \(anonymous\) from {remote}: stream 3 belongs to connector 'owner/0', "
         "not 'other/0'$"),
        ("INFO", "aqueduct.bridge.ingest.service", rf"^session ended: other/0 from {remote} by its stream's refusal$"),
        ("WARNING", "aqueduct.bridge.ingest.service", rf"^refused a connector from {remote}: unknown frame tag 0x5a$"),
        ("WARNING", "aqueduct.runtime.backends.quic_server",
         r"^QUIC handshake from 127\.0\.0\.1:\d+ failed: .*unable to get local issuer certificate$"),
    ]  # fmt: skip
    for level, name, pattern in expected:
        assert any(lv == level and n == name and re.match(pattern, m) for lv, n, m in lines), (pattern, lines)
    refused = [r for r in caplog.records if getattr(r, "fields", {}).get("event") in ("session_refused", "stream_refused")]
    assert sorted(r.fields["kind"] for r in refused) == ["bad_cookie", "protocol_violation", "stream_owner"]  # type: ignore[attr-defined]


def test_serve_help_names_the_operator_options() -> None:
    from aqueduct.bridge.app.cli import parser

    text = parser()._subparsers._group_actions[0].choices["serve"].format_help()  # type: ignore[union-attr]
    for option in ("--metrics HOST:PORT", "--log-format {text,json}", "--spark-ui PORT", "--status-interval"):
        assert option in text
