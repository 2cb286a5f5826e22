"""``aqueduct-bridge serve --pipeline``: the user's ``build(df)`` runs as the bridge's query.

The documented example (``examples/pipeline_job.py``) is served by the real
CLI in a subprocess, fed by a producer, and its Parquet output read back;
pipelines that raise, return the wrong thing or cannot start are refused
with an error naming the pipeline, and leave the log free for the next try.
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
from typing import Any

import pyarrow.parquet as pq
import pytest

from aqueduct.bridge.app.pipeline import PipelineError
from aqueduct.bridge.app.service import Bridge, BridgeConfig
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.producer.client import Connector

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TIMEOUT = 180.0  # only turns a hang into a failure
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            "def build(df):\n    raise ValueError('no schema for orders')\n",
            "--pipeline {spec} raised ValueError('no schema for orders')",
        ),
        (
            "def build(df):\n    return df\n",
            "--pipeline {spec} returned DataFrame; it must return a DataStreamWriter",
        ),
        (
            "def build(df):\n    return df.writeStream.format('no-such-sink')\n",
            "--pipeline {spec}: starting its query failed:",
        ),
    ],
    ids=["raises", "wrong-type", "cannot-start"],
)
async def test_a_broken_pipeline_is_named_and_leaves_the_log_free(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: Any, body: str, error: str
) -> None:
    module = f"aq_pipeline_{request.node.callspec.id.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = f"{module}:build"
    cfg = BridgeConfig(log_dir=tmp_path / "log", tcp=("127.0.0.1", 0), pipeline=spec,
                       checkpoint_dir=tmp_path / "ck")  # fmt: skip
    bridge = Bridge(cfg, spark=spark)
    with pytest.raises(PipelineError) as caught:
        await bridge.start()
    await bridge.stop()
    assert error.format(spec=spec) in str(caught.value)
    assert not spark.streams.active
    DurableLog(tmp_path / "log").close()  # the writer lock was released: a fixed pipeline can start


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def test_serve_runs_the_documented_pipeline_and_acks_after_its_parquet_commit(tmp_path: Path) -> None:
    port = free_port()
    env = os.environ | {"PYSPARK_PYTHON": sys.executable, "EVENTS_PATH": str(tmp_path / "events")}
    cli = str(Path(sys.executable).with_name("aqueduct-bridge"))
    args = ["serve", "--tcp", f"127.0.0.1:{port}", "--log", str(tmp_path / "log"), "--master", "local[1]",
            "--checkpoint", str(tmp_path / "ck"), "--pipeline", "pipeline_job:build"]  # fmt: skip
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        job = subprocess.Popen([cli, *args], cwd=EXAMPLES, env=env, stdout=out, stderr=out, start_new_session=True)
    try:
        for _ in range(int(TIMEOUT / 0.2)):
            assert job.poll() is None, log.read_text()[-3000:]
            if listening(port):
                break
            await asyncio.sleep(0.2)
        users = [f"u{i % 3}" for i in range(30)]
        async with Connector(f"tcp://127.0.0.1:{port}", program="shop", instance="a") as conn:
            s = await conn.stream(1, "orders")
            for i, user in enumerate(users):
                await s.send(json.dumps({"user": user, "amount": float(i)}).encode())
                if i % 10 == 9:
                    await s.send(None, boundary=True)
            await s.send(b"not json: the pipeline drops it")
            await s.send(None, boundary=True)
            await conn.wait_all_acked(TIMEOUT)
        # Acked means committed by the pipeline's own sink: every event is in its Parquet, once.
        table = pq.read_table(tmp_path / "events").to_pylist()
        assert sorted((r["message_id"], str(r["user"])) for r in table) == sorted(
            (i + i // 10, u) for i, u in enumerate(users)
        )
        job.send_signal(signal.SIGTERM)
        assert job.wait(TIMEOUT) == 0, log.read_text()[-3000:]
    finally:
        if job.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGKILL)
            job.wait(TIMEOUT)
