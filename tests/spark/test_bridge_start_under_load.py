"""A bridge starting while a fleet already knocks: Spark's start must not hang.

py4j's callback server (which the bridge's commit listener needs) waits on
its socket with ``select()``, which fails for descriptor numbers of 1024
or more; its thread then ends, and Spark's query start blocks forever on a
listener call nobody answers. Producers connecting while Spark started used
to push the bridge past that number. Here 1,100 connections wait for the
bridge as it starts; it must start, serve a producer and stop cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from aqueduct.connector.producer.client import Connector

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TIMEOUT = 180.0  # only turns a hang into a failure
KNOCKING = 1100  # connections waiting while the bridge starts: past descriptor 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def knock(port: int, held: list[socket.socket], stop: threading.Event) -> None:
    """Open ``KNOCKING`` connections as soon as the port accepts them, and hold them."""
    while len(held) < KNOCKING and not stop.is_set():
        try:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError:
            time.sleep(0.02)


async def test_a_bridge_starts_and_serves_while_a_fleet_is_already_connecting(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4 * KNOCKING:
        pytest.skip(f"needs {4 * KNOCKING} descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4 * KNOCKING), hard))
    port = free_port()
    held: list[socket.socket] = []
    stop = threading.Event()
    knocker = threading.Thread(target=knock, args=(port, held, stop), daemon=True)
    knocker.start()
    cli = str(Path(sys.executable).with_name("aqueduct-bridge"))
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        bridge = subprocess.Popen(
            [cli, "serve", "--tcp", f"127.0.0.1:{port}", "--log", str(tmp_path / "log"), "--output",
             str(tmp_path / "out"), "--master", "local[1]", "--spark-start-timeout", str(TIMEOUT / 2)],
            stdout=out, stderr=out, env=os.environ | {"PYSPARK_PYTHON": sys.executable}, start_new_session=True,
        )  # fmt: skip
    try:
        for _ in range(int(TIMEOUT / 0.2)):
            assert bridge.poll() is None, log.read_text()[-3000:]
            if len(held) >= KNOCKING:
                break
            await asyncio.sleep(0.2)
        assert len(held) >= KNOCKING
        async with Connector(f"tcp://127.0.0.1:{port}", program="late", instance="one") as conn:
            s = await conn.stream(1, "orders")
            for i in range(10):
                await s.send(b"m%d" % i)
            await s.send(None, boundary=True)
            await conn.wait_all_acked(TIMEOUT)  # Spark committed them: the query and its listener run
        bridge.send_signal(signal.SIGTERM)
        assert bridge.wait(TIMEOUT) == 0, log.read_text()[-3000:]
    finally:
        stop.set()
        for s in held:
            s.close()
        if bridge.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(bridge.pid, signal.SIGKILL)
            bridge.wait(TIMEOUT)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
