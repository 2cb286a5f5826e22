"""The documented example job, run the ways a user runs it, killed mid-stream, then stopped by Ctrl-C under load.

``examples/own_pipeline.py`` (a ``SparkBridge``) is started with
``spark-submit``, killed with SIGKILL once its first batch is written (its
Spark driver and the receiver die together), and started again with plain
``python``. The producer keeps going across the outage. Every message must
be in the job's own sink exactly once, and the producer must end with
everything acked.

The restarted job is then stopped the way a user stops it: the producer
sends throughout, and once more batches are written the job gets SIGINT
(SIGTERM takes the same path: ``SparkBridge.await_termination`` turns
either into one flag). It must exit 0, and from there to its exit print no
error, no stack trace and none of the stop's warnings. The JVM is the
user's here, not the bridge's: its stderr goes straight to the terminal, so
the bridge cannot filter what it prints as ``serve`` does. It has nothing
to filter: the bridge stops taking records, lets the query finish its
micro-batch and stops it between two (``aqueduct.bridge.app.query_stop``),
where Spark's stream thread only waits for its next trigger.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
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
#: what a stop must not print: Java stack frames, Python tracebacks, errors, log4j's warnings, and
#: the bridge's own warning that the query was stopped inside a micro-batch (query_stop)
NOISE = ("\tat ", "Traceback (", " ERROR ", "Exception", " WARN ", "still in a micro-batch")
#: a warning of the running query, not of the stop: a batch took longer than the trigger interval
BEHIND = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d WARN ProcessingTimeExecutor: Current batch is falling behind")


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


async def test_example_job_under_spark_submit_killed_restarted_with_python_exactly_once_and_ctrl_c_quiet(
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

            async def load() -> None:
                for i in range(1_000_000):  # until the job stops
                    await s.send(json.dumps({"user": f"c{i}", "amount": float(i)}).encode())
                    if i % 10 == 9:  # the stream has epochs: a batch takes only closed ones
                        await s.send(None, boundary=True)
                    if i % 50 == 49:
                        await asyncio.sleep(0.01)

            written = len(list((tmp_path / "out").glob("batch-*.jsonl")))
            sender = asyncio.create_task(load())
            log = tmp_path / "second.log"
            await until(lambda: len(list((tmp_path / "out").glob("batch-*.jsonl"))) >= written + 2,
                        "two batches under load", second, log)  # fmt: skip
            assert not sender.done()
            second.send_signal(signal.SIGINT)  # Ctrl-C
            await until(lambda: "stopping" in log.read_text(), "the job to start stopping", second, log)
            exited = await asyncio.to_thread(second.wait, TIMEOUT)
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
        text = log.read_text()
        assert exited == 0, text[-3000:]
        assert "stopped" in text
        after = text[text.index("stopping") :]
        noise = [line for line in after.splitlines() if any(n in line for n in NOISE) and not BEHIND.match(line)]
        assert noise == [], after[-5000:]
    finally:
        for job in (first, second):
            if job is not None and job.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(job.pid, signal.SIGKILL)
                job.wait(TIMEOUT)
