"""A clean stop when the bridge's Spark JVM ends first, from a stop signal.

A service manager (systemd, a container runtime) stops a service by
signalling its process group, or every process of the unit, the JVM
perhaps first. The bridge must then exit 0 with one line saying what
happened and no traceback, everything it acked durable, and leave no
process behind. SIGTERM to the group (the JVM untouched, in a session
of its own) is :mod:`tests.reliability.test_serve_quiet_logs`'s stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from pathlib import Path

import psutil
import pytest

from demo.producer import produce
from demo.verify import verify_output
from demo.workload import Workload
from tests.ports import free_port
from tests.spark.serve_process import TIMEOUT, bridge_command
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]


async def _serve_and_deliver(tmp: Path) -> tuple[asyncio.subprocess.Process, list[psutil.Process]]:
    """A bridge leading its own process group (as under systemd), with a workload delivered and acked."""
    port = free_port(socket.SOCK_STREAM)
    with open(tmp / "bridge.log", "wb") as log:
        proc = await asyncio.create_subprocess_exec(
            *bridge_command(port, tmp), stdout=log, stderr=log, start_new_session=True
        )
    workload = Workload(producers=1, streams=2, events=200, epoch=20)
    for _ in range(int(TIMEOUT / 0.2)):  # listening (Spark may still be starting)
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            break
        assert proc.returncode is None, (tmp / "bridge.log").read_text()[-3000:]
        await asyncio.sleep(0.2)
    await produce(f"tcp://127.0.0.1:{port}", workload, 0, timeout=TIMEOUT)  # every message acked
    await wait_until(
        lambda: verify_output(tmp / "out", workload.expected()).ok, "every row in the sink", TIMEOUT, every=0.25
    )
    return proc, psutil.Process(proc.pid).children(recursive=True)


def _jvms(tree: list[psutil.Process]) -> list[psutil.Process]:
    """The JVMs among the bridge's processes.

    A child listed a moment ago may be gone by now: Hadoop's local file
    system forks a short-lived ``chmod`` for files Spark's sink writes, and
    Python workers come and go. Such a child is no JVM.
    """
    jvms = []
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            if "java" in p.name():
                jvms.append(p)
    return jvms


async def _ends_cleanly(proc: asyncio.subprocess.Process, tree: list[psutil.Process], log: Path) -> str:
    try:
        assert await asyncio.wait_for(proc.wait(), TIMEOUT) == 0, log.read_text()[-3000:]
        _, alive = await asyncio.to_thread(psutil.wait_procs, tree, timeout=30)
        assert not alive, f"processes outlived the bridge: {alive}"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        for p in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    return text


async def test_the_jvm_ending_first_from_a_stop_signal_stops_the_bridge_cleanly(tmp_path: Path) -> None:
    proc, tree = await _serve_and_deliver(tmp_path)
    (jvm,) = _jvms(tree)
    jvm.send_signal(signal.SIGTERM)  # a unit stop that signals every process, the JVM first
    text = await _ends_cleanly(proc, tree, tmp_path / "bridge.log")
    assert "aqueduct-bridge: Spark's JVM ended by SIGTERM (exit status 143): stopped in " in text
