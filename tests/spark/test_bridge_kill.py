"""Kill -9 the bridge mid-stream, restart it: every message still lands exactly once.

The bridge runs as a real ``aqueduct-bridge serve`` process (with its own
Spark driver JVM as a child); the producers are connector clients in this
process that keep going across the outage: they reconnect, get the log's
durable points in OK, and re-send the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from demo.producer import produce
from demo.verify import verify_output
from demo.workload import Workload

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TIMEOUT = 180.0  # generous: only there to turn a hang into a failure


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bridge_command(port: int, tmp: Path) -> list[str]:
    script = Path(sys.executable).with_name("aqueduct-bridge")
    program = [str(script)] if script.exists() else [sys.executable, "-m", "aqueduct.bridge.app.cli"]
    return [
        *program, "serve", "--tcp", f"127.0.0.1:{port}", "--log", str(tmp / "log"),
        "--output", str(tmp / "out"), "--master", "local[1]", "--trigger-interval", "0.5",
        "--max-lag", "200", "--credits", "256", "--status-interval", "1",
    ]  # fmt: skip


async def _start_bridge(port: int, tmp: Path, name: str) -> asyncio.subprocess.Process:
    with open(tmp / f"{name}.log", "wb") as log:
        proc = await asyncio.create_subprocess_exec(
            *_bridge_command(port, tmp), stdout=log, stderr=log
        )
    for _ in range(int(TIMEOUT / 0.2)):  # listening (Spark may still be starting)
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return proc
        assert proc.returncode is None, (tmp / f"{name}.log").read_text()[-3000:]
        await asyncio.sleep(0.2)
    raise AssertionError(f"{name} never listened on port {port}")


async def _until(predicate: Callable[[], bool], what: str) -> None:
    for _ in range(int(TIMEOUT / 0.25)):
        if predicate():
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


async def test_sigkill_mid_stream_and_restart_delivers_every_message_exactly_once(
    tmp_path: Path,
) -> None:
    workload = Workload(producers=2, streams=2, events=2000, epoch=50)
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    first = await _start_bridge(port, tmp_path, "first")
    jvm: list[psutil.Process] = []
    second: asyncio.subprocess.Process | None = None

    async def produce_all() -> list[dict]:
        return await asyncio.gather(*(produce(url, workload, p, timeout=TIMEOUT) for p in range(2)))

    producers = asyncio.create_task(produce_all())
    try:
        # Spark planned its first micro-batch (its offsets are in the checkpoint) and
        # is writing it: the worst moment, the batch must be redone after the restart ...
        await _until(lambda: (tmp_path / "out" / "_checkpoint" / "offsets" / "0").exists(),
                     "a planned micro-batch")  # fmt: skip
        jvm = psutil.Process(first.pid).children(recursive=True)
        first.send_signal(signal.SIGKILL)
        await first.wait()
        # ... and the producers are mid-stream: credits and --max-lag pace them to Spark.
        assert not producers.done()
        # The Spark driver JVM dies with its Python parent, releasing the checkpoint.
        gone, alive = psutil.wait_procs(jvm, timeout=30)
        assert not alive, f"processes outlived the killed bridge: {alive}"

        second = await _start_bridge(port, tmp_path, "second")
        stats = await asyncio.wait_for(producers, TIMEOUT)
        assert all(s["connections"] >= 2 for s in stats)  # each resumed on a new session
        expected = workload.expected()
        await _until(lambda: verify_output(tmp_path / "out", expected).rows >= workload.total,
                     "every row in the sink")  # fmt: skip
        second.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(second.wait(), TIMEOUT) == 0
    finally:
        producers.cancel()
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()
        for p in jvm:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
    result = verify_output(tmp_path / "out", workload.expected())
    assert result.ok, result.problems()
    status = (tmp_path / "second.log").read_text()
    assert "aqueduct-bridge: sessions" in status  # periodic status lines on stderr
