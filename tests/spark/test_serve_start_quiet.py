"""``aqueduct-bridge serve`` starts without Spark's harmless warnings, and says nothing it need not.

A real bridge process starts its own Spark (``local[1]``), a producer
gets its first ACK (the query ran a micro-batch), and SIGTERM stops it.
Nothing it printed is one of the start's harmless warnings: adaptive
query execution "not supported in streaming" (off in the bridge's
session), Hadoop's missing native library (kept out at DEBUG), the host
name resolving to a loopback address (a local master's JVM is told its
address; this machine's name resolves to 127.0.0.1, so Spark warns here
unless told).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import pytest

from aqueduct.connector.producer.client import Connector
from tests.spark.test_bridge_kill import TIMEOUT, _free_port, _start_bridge

pytestmark = [pytest.mark.slow, pytest.mark.spark]

#: Spark's harmless start warnings, as the JVM words them
HARMLESS = ("spark.sql.adaptive.enabled", "NativeCodeLoader", "native-hadoop", "resolves to a loopback address",
            "SPARK_LOCAL_IP")  # fmt: skip


async def test_a_serve_start_to_first_ack_prints_none_of_sparks_harmless_warnings(tmp_path: Path) -> None:
    port = _free_port()
    proc = await _start_bridge(port, tmp_path, "bridge")
    try:
        async with Connector(f"tcp://127.0.0.1:{port}", program="p", instance="i") as conn:
            s = await conn.stream(1, "s")
            await s.send_many([b"hello"] * 10)
            await conn.wait_all_acked(TIMEOUT)  # the query ran a micro-batch
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), TIMEOUT) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
    text = (tmp_path / "bridge.log").read_text()
    assert "listening on" in text and "stopped in" in text
    said = [line for line in text.splitlines() if any(h in line for h in HARMLESS)]
    assert said == [], text[-5000:]
