"""``serve`` takes records while Spark still starts, and acks them only once a micro-batch committed them.

A real ``aqueduct-bridge serve`` whose ``--pipeline``
(tests/spark/gated_pipeline.py) holds the query's start until the test
lets it go, and a producer in this process. While the start is held the
producer's records must be durable (its sends past its few credits
return only once the log granted them again, and the bridge's status line
counts them) and unacked; once the query ran, the ACK comes, and Spark's
commit log then holds the micro-batch that committed them. While it is
held, what Spark started for a short start is checked too: no worker
looked for static Python data sources (the bridge answered), and its
Python workers do not import pyspark from the zip Spark puts first on
their path (docs/performance.md, "The Python workers' start").
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from aqueduct.connector.producer.client import Connector
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TIMEOUT = 180.0  # only turns a hang into a failure
ROOT = Path(__file__).resolve().parents[2]
CREDITS = 4  # few: sending more than this needs credits the log grants back once records are durable
RECORDS = 3 * CREDITS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def events(log: Path) -> list[dict[str, Any]]:
    """The bridge's JSON lines so far (the JVM's own lines are text and skipped)."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "event" in record:
            found.append(record)
    return found


def said(log: Path) -> list[str]:
    """The events of the bridge's lines so far, in order."""
    return [e["event"] for e in events(log)]


def spark_pythons(bridge: int) -> dict[int, str]:
    """The command lines of the Python processes Spark started under ``bridge`` and keeps (its workers' daemons)."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:  # "pid (name) state ppid ..."
            parent[int(stat.parent.name)] = int(stat.read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):  # ended meanwhile
            continue
    found = {}
    for pid, ancestor in parent.items():
        while ancestor not in (bridge, 0, 1) and ancestor in parent:
            ancestor = parent[ancestor]
        try:
            command = Path("/proc", str(pid), "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if ancestor == bridge and Path(command.split(" ")[0]).name.startswith("python") and "pyspark" in command:
            found[pid] = command
    return found


def imports_zipped_pyspark(pid: int) -> bool:
    """Whether a pyspark.zip that exists comes on the process's ``PYTHONPATH`` (Spark puts it first)."""
    environ = dict(v.split("=", 1) for v in Path("/proc", str(pid), "environ").read_text().split("\0") if "=" in v)
    return any(p.endswith("pyspark.zip") and Path(p).exists() for p in environ.get("PYTHONPATH", "").split(os.pathsep))


def running(bridge: asyncio.subprocess.Process, log: Path) -> bool:
    assert bridge.returncode is None, log.read_text()[-3000:]
    return True


async def test_records_are_durable_before_the_query_runs_and_acked_only_after_it_committed(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "hold").touch()
    port = free_port()
    log = tmp_path / "serve.log"
    checkpoint = tmp_path / "checkpoint"
    command = [
        str(Path(sys.executable).with_name("aqueduct-bridge")), "serve", "--tcp", f"127.0.0.1:{port}",
        "--log", str(tmp_path / "log"), "--checkpoint", str(checkpoint), "--output", str(tmp_path / "out"),
        "--pipeline", "tests.spark.gated_pipeline:build", "--master", "local[1]", "--credits", str(CREDITS),
        "--log-format", "json", "--status-interval", "0.2",
    ]  # fmt: skip
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = os.environ | {"AQUEDUCT_TEST_GATE": str(gate), "PYTHONPATH": path, "PYSPARK_PYTHON": sys.executable}
    with open(log, "wb") as out:
        bridge = await asyncio.create_subprocess_exec(*command, stdout=out, stderr=out, env=env)
    conn = Connector(f"tcp://127.0.0.1:{port}", program="t", instance="early", backoff=(0.05, 0.2))
    try:
        await wait_until(lambda: running(bridge, log) and "listening" in said(log), "the listening line", TIMEOUT, every=0.1)
        await conn.connect()
        stream = await conn.stream(1, "early")
        for i in range(RECORDS):  # past the first CREDITS, each send waits for records made durable
            await stream.send(b"record %d" % i)
        await stream.send(None, boundary=True)
        await wait_until(
            lambda: running(bridge, log) and any(e.get("durable_records", 0) >= RECORDS for e in events(log)),
            "the status line to count the records durable", TIMEOUT, every=0.1,
        )  # fmt: skip
        await wait_until(lambda: running(bridge, log) and (gate / "built").exists(), "Spark's session, the query held",
                         TIMEOUT, every=0.1)  # fmt: skip
        assert "query_running" not in said(log)  # held: no query ran, none committed
        assert stream.acked == 0, "acked before any micro-batch committed"
        pythons = spark_pythons(bridge.pid)  # so far: load()'s worker, and no lookup of static Python sources
        assert any("create_data_source" in c for c in pythons.values()), pythons
        assert not any("lookup_data_sources" in c for c in pythons.values()), pythons
        assert not any(imports_zipped_pyspark(pid) for pid in pythons), "they import the installed, compiled pyspark"

        (gate / "hold").unlink()  # the query starts, commits its first micro-batch, then acks
        await conn.wait_all_acked(TIMEOUT)
        assert stream.acked == stream.next_id
        assert sorted(f.name for f in (checkpoint / "commits").iterdir() if f.name.isdigit())  # committed first
        lines = said(log)
        assert lines.count("listening") == 1 and lines.count("query_running") == 1
        assert lines.index("listening") < lines.index("query_running")
        bridge.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(bridge.wait(), TIMEOUT) == 0, log.read_text()[-3000:]
    finally:
        (gate / "hold").unlink(missing_ok=True)
        await conn.close(flush_timeout=0)
        if bridge.returncode is None:
            bridge.kill()
            await bridge.wait()
