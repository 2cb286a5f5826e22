"""A bridge paused (SIGSTOP) past its producers' idle timeout, then resumed: nothing lost, nothing twice.

The ingest runs in its own process (``small_disk_bridge.py``, log on
ordinary disk) serving TCP and QUIC; one producer of each keeps sending.
The QUIC producer (idle timeout 2 s) gives the paused bridge up and
reconnects when it answers again; the TCP one just waits (the kernel
holds its connection). After SIGCONT both finish with every message acked.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from aqueduct.connector.producer.client import Connector
from aqueduct.runtime.certs import generate_certs
from tests.reliability.faults import Figures, tally
from tests.reliability.ingest_child import TIMEOUT, IngestChild

PER_STREAM = 400


async def test_a_bridge_paused_past_the_idle_timeout_then_resumed_loses_and_repeats_nothing(
    tmp_path: Path, figures: Figures
) -> None:
    certs = generate_certs(tmp_path / "certs")
    (tmp_path / "log").mkdir()
    bridge = await IngestChild.start(["--mount", str(tmp_path / "log"), "--certs", str(tmp_path / "certs")],
                                     tmp_path / "bridge.log")  # fmt: skip
    tcp, quic = bridge.ports
    urls = {1: f"tcp://127.0.0.1:{tcp}", 2: f"aqueduct://127.0.0.1:{quic}"}
    connections: dict[int, int] = {}

    async def producer(sid: int, paused: asyncio.Event) -> None:
        async with Connector(urls[sid], program="p", instance=f"i{sid}", cafile=certs.ca, idle_timeout=2.0,
                             backoff=(0.05, 0.5)) as conn:  # fmt: skip
            stream = await conn.stream(sid, f"s{sid}")
            for i in range(PER_STREAM):
                if i == PER_STREAM // 2:
                    await paused.wait()  # the second half goes out around the pause
                await stream.send(b"m%d" % i)
            await conn.wait_all_acked(TIMEOUT)
            connections[sid] = conn.stats.connections

    paused = asyncio.Event()
    try:
        producers = asyncio.gather(*(producer(sid, paused) for sid in urls))
        await bridge.until("the first halves durable",
                           lambda r: all(r["durable"].get(str(s), 0) >= PER_STREAM // 2 for s in urls))  # fmt: skip
        bridge.proc.send_signal(signal.SIGSTOP)
        paused.set()
        await asyncio.sleep(5.0)  # more than twice the QUIC producer's idle timeout
        bridge.proc.send_signal(signal.SIGCONT)
        await asyncio.wait_for(producers, TIMEOUT)
        stored = await bridge.stop()
    finally:
        if bridge.proc.returncode is None:
            bridge.proc.send_signal(signal.SIGCONT)
        await bridge.kill()
    t = tally({s: {i: b"m%d" % i for i in range(PER_STREAM)} for s in urls}, stored)
    figures.count(t)
    figures.faults = {"sigstop_s": 5.0, "quic_idle_timeout_s": 2.0}
    figures.extra = {"connections": connections}
    assert t.exactly_once, t
    assert connections[2] >= 2  # the QUIC producer gave the paused bridge up and came back
