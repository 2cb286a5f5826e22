"""A user's own job (``examples/own_pipeline.py``, a ``SparkBridge``) stopped by Ctrl-C under load: no trace.

The JVM is the user's here, not the bridge's: its stderr goes straight to
the terminal, so the bridge cannot filter what it prints as ``serve``
does. What a stop of the query causes (tasks interrupted, killed, their
writes aborted) is silenced in the JVM's own log4j loggers for the time of
``SparkBridge.stop()`` only. The job runs with plain ``python``, a real
producer sends throughout; once batches are written the job gets SIGINT,
and from there to its exit Spark's log has no error, no stack trace and
none of the stop's warnings.

Two kinds of trace do not go through log4j and so still reach the user's
terminal (see ``jvm.quiet_stop``): a Python worker's ``BrokenPipeError``
when its killed task's socket closes, and the ``StackOverflowError`` Spark's
stream thread can hit while telling whether the stop caused the
``foreachBatch`` function's failure. They are named here, so that anything
else fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sys
from pathlib import Path

import pytest

from aqueduct.connector.producer.client import Connector
from tests.spark.test_own_pipeline_job import EXAMPLE, free_port, launch, listening, until

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TIMEOUT = 180.0  # only turns a hang into a failure
#: what a stop must not print: Java stack frames, Python tracebacks, errors, log4j's warnings
NOISE = ("\tat ", "Traceback (", " ERROR ", "Exception", " WARN ")
#: a warning of the running query, not of the stop: a batch took longer than the trigger interval
BEHIND = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d WARN ProcessingTimeExecutor: Current batch is falling behind")
#: the traces a stop of a user's JVM still prints, outside log4j (see the module docstring)
UNFILTERED = (
    re.compile(r"^Traceback \(most recent call last\):\n(  File \".*pyspark/daemon\.py\".*\n)+BrokenPipeError: .*\n", re.M),
    re.compile(
        r'^Exception in thread "stream execution thread [^\n]*" java\.lang\.StackOverflowError\n(\tat java\.base/java\.util\.regex\.[^\n]*\n)+',
        re.M,
    ),
)


async def test_a_sigint_under_load_stops_the_users_job_with_no_stack_trace(tmp_path: Path) -> None:
    port = free_port()
    job = launch([sys.executable], port, tmp_path, "job")
    log = tmp_path / "job.log"
    try:
        await until(lambda: listening(port), "the job to listen", job, log)
        async with Connector(f"tcp://127.0.0.1:{port}", program="shop", instance="a") as conn:
            s = await conn.stream(1, "orders")

            async def send() -> None:
                for i in range(1_000_000):  # until the job stops
                    await s.send(json.dumps({"user": f"u{i}", "amount": i}).encode())
                    if i % 50 == 0:
                        await asyncio.sleep(0.01)

            sender = asyncio.create_task(send())
            await until(lambda: len(list((tmp_path / "out").glob("batch-*.jsonl"))) >= 3, "three batches", job, log)
            assert not sender.done()
            job.send_signal(signal.SIGINT)
            await until(lambda: "stopping" in log.read_text(), "the job to start stopping", job, log)
            exited = await asyncio.to_thread(job.wait, TIMEOUT)
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    text = log.read_text()
    assert exited == 0, text[-3000:]
    assert "stopped" in text
    after = text[text.index("stopping") :]
    for known in UNFILTERED:
        after = known.sub("", after)
    noise = [line for line in after.splitlines() if any(n in line for n in NOISE) and not BEHIND.match(line)]
    assert noise == [], after[-5000:]
    assert EXAMPLE.exists()
