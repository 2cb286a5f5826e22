"""The documented example job, run the ways a user runs it, killed mid-stream.

``examples/own_pipeline.py`` is started with ``spark-submit``, killed with
SIGKILL once its first batch is written (its Spark driver and the receiver
die together), and started again with plain ``python``. The producer keeps
going across the outage. Every message must be in the job's own sink
exactly once, and the producer must end with everything acked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from aqueduct.connector.producer.client import Connector

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TIMEOUT = 180.0  # only turns a hang into a failure
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_pipeline.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(program: list[str], port: int, tmp: Path, name: str) -> subprocess.Popen:
    env = os.environ | {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    args = ["--log", str(tmp / "log"), "--out", str(tmp / "out"), "--tcp", f"127.0.0.1:{port}", "--trigger", "0.5"]
    with open(tmp / f"{name}.log", "wb") as out:
        # A session of its own: spark-submit's JVM, the Python driver and its JVM die as a group.
        return subprocess.Popen(
            [*program, str(EXAMPLE), *args], stdout=out, stderr=out, env=env, start_new_session=True
        )


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for p in sorted(out.glob("batch-*.jsonl")) for line in p.read_text().splitlines()]


async def until(predicate, what: str, job: subprocess.Popen, log: Path) -> None:
    for _ in range(int(TIMEOUT / 0.2)):
        if predicate():
            return
        assert job.poll() is None, f"the job exited while waiting for {what}:\n{log.read_text()[-3000:]}"
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def test_example_job_under_spark_submit_killed_and_restarted_with_python_delivers_exactly_once(
    tmp_path: Path,
) -> None:
    port = free_port()
    spark_submit = str(Path(sys.executable).with_name("spark-submit"))
    first = launch([spark_submit, "--master", "local[1]"], port, tmp_path, "first")
    second: subprocess.Popen | None = None
    sent: list[str] = []
    try:
        await until(lambda: listening(port), "the receiver to listen", first, tmp_path / "first.log")
        async with Connector(f"tcp://127.0.0.1:{port}", program="shop", instance="a") as conn:
            s = await conn.stream(1, "orders")

            async def send(users: list[str]) -> None:
                for i, user in enumerate(users):
                    await s.send(json.dumps({"user": user, "amount": float(i)}).encode())
                    if i % 10 == 9:
                        await s.send(None, boundary=True)
                sent.extend(users)

            await send([f"a{i}" for i in range(100)])
            await until(lambda: rows(tmp_path / "out"), "a first batch in the sink", first, tmp_path / "first.log")
            os.killpg(first.pid, signal.SIGKILL)  # the whole job: driver, receiver, JVMs
            first.wait(TIMEOUT)
            await send([f"b{i}" for i in range(100)])  # while the job is down: kept by the producer
            second = launch([sys.executable], port, tmp_path, "second")
            await conn.wait_all_acked(TIMEOUT)
        # Acked means committed in the job's sink: every message is there now, once.
        got = rows(tmp_path / "out")
        assert sorted(r["user"] for r in got) == sorted(sent)
        assert len({(r["stream_id"], r["message_id"]) for r in got}) == len(sent)
        second.send_signal(signal.SIGTERM)  # like Ctrl-C: a clean stop
        assert second.wait(TIMEOUT) == 0, (tmp_path / "second.log").read_text()[-3000:]
        assert "stopped" in (tmp_path / "second.log").read_text()
    finally:
        for job in (first, second):
            if job is not None and job.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(job.pid, signal.SIGKILL)
                job.wait(TIMEOUT)
