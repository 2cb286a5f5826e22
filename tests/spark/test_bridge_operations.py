"""``aqueduct-bridge serve`` as an operator runs it: JSON logs, /metrics and the Spark UI while producers run.

One real bridge process (its own Spark driver), producers over loopback TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from aqueduct.bridge.app.stalled import STALLED_AFTER as DEFAULT_STALLED_AFTER
from aqueduct.connector.errors import ConnectorRefused
from aqueduct.connector.producer.client import Connector

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TIMEOUT = 180.0  # generous: only there to turn a hang into a failure
STALLED_AFTER = 0.5  # seconds: short, so the wait for the unacked producer to count as stalled is short


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_json_logs_metrics_and_spark_ui_of_a_running_bridge(tmp_path: Path) -> None:
    port, metrics_port, ui_port = _free_port(), _free_port(), _free_port()
    script = Path(sys.executable).with_name("aqueduct-bridge")
    program = [str(script)] if script.exists() else [sys.executable, "-m", "aqueduct.bridge.app.cli"]
    stderr = tmp_path / "bridge.stderr"
    with open(stderr, "wb") as err:
        proc = await asyncio.create_subprocess_exec(
            *program, "serve", "--tcp", f"127.0.0.1:{port}", "--log", str(tmp_path / "log"),
            "--sink", "memory", "--checkpoint", str(tmp_path / "ck"), "--master", "local[1]",
            "--trigger-interval", "0.3", "--cookie", "secret", "--status-interval", "0.2",
            "--log-format", "json", "--metrics", f"127.0.0.1:{metrics_port}", "--spark-ui", str(ui_port),
            stdout=err, stderr=err,
        )  # fmt: skip
    try:
        async with Connector(f"tcp://127.0.0.1:{port}", program="shop", instance="1", cookie="secret",
                             connect_timeout=TIMEOUT) as conn:  # fmt: skip
            stream = await conn.stream(1, "orders")
            await stream.send_many([b"order %d" % i for i in range(50)])
            assert await conn.flush(TIMEOUT) == 0  # acked: Spark committed them
        with pytest.raises(ConnectorRefused, match="^bad cookie$"):
            await Connector(f"tcp://127.0.0.1:{port}", program="shop", instance="2", cookie="guess",
                            connect_timeout=TIMEOUT).connect()  # fmt: skip
        metrics = _samples(await asyncio.to_thread(_get, f"http://127.0.0.1:{metrics_port}/metrics"))
        assert metrics[("aqueduct_records_acked_total", ())] == 50
        assert metrics[("aqueduct_consumer_committed_records_total", (("consumer", "default"),))] == 50
        assert metrics[("aqueduct_refusals_total", (("reason", "bad_cookie"),))] == 1
        assert metrics[("aqueduct_microbatches_total", ())] >= 1
        ui = await asyncio.to_thread(_get, f"http://127.0.0.1:{ui_port}/api/v1/applications")
        assert json.loads(ui)[0]["name"] == "aqueduct-bridge"
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), TIMEOUT)
        if proc.returncode is None:
            proc.kill()
    assert proc.returncode == 0, stderr.read_text()[-3000:]

    lines = stderr.read_text().splitlines()
    assert not [line for line in lines if line.startswith("aqueduct-bridge:")]  # all of ours are JSON
    records = [json.loads(line) for line in lines if line.startswith("{")]
    events = [r.get("event") for r in records]
    for event in ("starting", "listening", "metrics", "session_started", "session_refused", "status", "stopped"):
        assert event in events, (event, events)
    (refused,) = [r for r in records if r.get("event") == "session_refused"]
    assert refused["level"] == "WARNING" and refused["logger"] == "aqueduct.bridge.ingest.service"
    assert refused["reason"] == "bad cookie" and refused["kind"] == "bad_cookie"
    assert refused["connector"] == "shop/2" and refused["remote"].startswith("tcp 127.0.0.1:")
    status = [{k: v for k, v in r.items() if k != "time"} for r in records if r.get("event") == "status"]
    assert all(a != b for a, b in zip(status, status[1:], strict=False))  # a line only when something changed


async def test_spark_bridge_serves_metrics_of_its_consumers(spark: object, tmp_path: Path) -> None:
    from aqueduct.bridge import SparkBridge

    with SparkBridge(
        spark, log=tmp_path / "log", tcp="127.0.0.1:0", metrics="127.0.0.1:0", stalled_after=STALLED_AFTER
    ) as bridge:
        bridge.stream("reports")  # registers the consumer; no query needed to be behind
        assert bridge.tcp_address is not None and bridge.metrics_address is not None
        async with Connector(f"tcp://127.0.0.1:{bridge.tcp_address[1]}", program="p", instance="0") as conn:
            stream = await conn.stream(1, "s")
            sending = time.monotonic()
            await stream.send_many([b"r"] * 5)
            metrics: dict = {}
            for _ in range(int(TIMEOUT / 0.1)):  # bounded: until the group commit made them durable
                url = f"http://127.0.0.1:{bridge.metrics_address[1]}/metrics"
                metrics = _samples(await asyncio.to_thread(_get, url))
                if metrics[("aqueduct_records_durable_total", ())] == 5:
                    break
                await asyncio.sleep(0.1)
            assert metrics[("aqueduct_sessions", ())] == 1
            assert metrics[("aqueduct_consumer_lag_records", (("consumer", "reports"),))] == 5
            age = metrics[("aqueduct_consumer_oldest_unread_age_seconds", (("consumer", "reports"),))]
            assert 0 <= age <= time.monotonic() - sending  # the oldest unread record is one just sent
            for _ in range(int(TIMEOUT / 0.1)):  # no query acks them: stalled once STALLED_AFTER passed
                if metrics[("aqueduct_stalled_producers", ())] == 1:
                    break
                await asyncio.sleep(0.1)
                metrics = _samples(await asyncio.to_thread(_get, url))
            stalled_at = time.monotonic() - sending
            assert metrics[("aqueduct_stalled_producers", ())] == 1 and conn.unacked == 5
            assert STALLED_AFTER <= stalled_at < DEFAULT_STALLED_AFTER  # the setting, not the 60 s default
