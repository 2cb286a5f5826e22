"""A producer is never acked while the sink still writes: a foreachBatch sink held mid-batch, SIGKILL, restart, drain.

The bridge runs as a real ``aqueduct-bridge serve --pipeline`` process
whose sink (tests/spark/blocking_sink.py) blocks inside ``foreachBatch``
until the test lets it go, so a micro-batch is written but not committed.
The producer, a connector in this process, must hear no ACK then: not on
its first session, and not on the session it opens to the restarted
bridge after a SIGKILL, which redoes the held batch (and holds it again).
The records it may not forget are all durable in the log meanwhile: only
the producer's acked point shows a premature ACK, so that is what is
checked, before the sink is read back (ids, payloads, whole epochs).

The restarted bridge is then drained with the batch still held: a bridge
with Spark inside sends its producer away, waits for its own query to
commit everything it holds, and exits 0. The producer, refused as busy
meanwhile, gets its ACKs from the bridge started again on the log (ingest
only here: the commits it acks from are the drained bridge's).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from collections import defaultdict
from pathlib import Path

import psutil
import pytest

from aqueduct.bridge.app.drain_files import read_state
from aqueduct.bridge.storage.consumers import DEFAULT_CONSUMER
from aqueduct.connector.producer.client import Connector, ConnectorStream
from tests.integration.test_cli_errors import command
from tests.spark.blocking_sink import read_rows
from tests.waiting import finish, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TIMEOUT = 180.0  # only turns a hang into a failure
ROOT = Path(__file__).resolve().parents[2]
CREDITS = 4  # few: sending more than this on a session needs ACK frames of that session


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start_bridge(port: int, tmp: Path, sink: Path, name: str, spark: bool = True) -> asyncio.subprocess.Process:
    """``serve`` with the held sink's pipeline on Spark (``spark=False``: ingest only), once it listens."""
    query = ["--output", str(tmp / "out"), "--pipeline", "tests.spark.blocking_sink:build", "--master", "local[1]"]
    serve = [
        *command("aqueduct-bridge"), "serve", "--tcp", f"127.0.0.1:{port}", "--log", str(tmp / "log"),
        *(query if spark else ["--ingest-only"]), "--credits", str(CREDITS), "--status-interval", "1",
    ]  # fmt: skip
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = os.environ | {"AQUEDUCT_TEST_SINK": str(sink), "PYTHONPATH": path, "PYSPARK_PYTHON": sys.executable}
    with open(tmp / f"{name}.log", "wb") as log:
        proc = await asyncio.create_subprocess_exec(*serve, stdout=log, stderr=log, env=env)
    await wait_until(lambda: listening(port, proc, tmp / f"{name}.log"), f"{name} to listen", TIMEOUT, every=0.1)
    return proc


def listening(port: int, proc: asyncio.subprocess.Process, log: Path) -> bool:
    assert proc.returncode is None, log.read_text()[-3000:]
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def test_no_ack_while_a_foreach_batch_sink_blocks_across_sigkill_restart_and_a_drain(tmp_path: Path) -> None:
    sink = tmp_path / "sink"
    sink.mkdir()
    (sink / "hold").touch()
    port = free_port()
    sent: dict[int, bytes] = {}

    async def send_epoch(stream: ConnectorStream, records: int) -> None:
        for _ in range(records):
            payload = b"message %d of the held sink" % stream.next_id
            sent[stream.next_id] = payload
            await stream.send(payload)
        await stream.send(None, boundary=True)

    first = await start_bridge(port, tmp_path, sink, "first")
    second = third = drainer = None
    jvm: list[psutil.Process] = []
    conn = Connector(f"tcp://127.0.0.1:{port}", program="t", instance="held", backoff=(0.05, 0.5))
    try:
        await conn.connect()
        stream = await conn.stream(1, "held")
        await send_epoch(stream, 10)
        await wait_until(lambda: (sink / f"entered-0-{first.pid}").exists(), "the sink to hold batch 0", TIMEOUT,
                         every=0.1)  # fmt: skip
        await send_epoch(stream, 10)  # durable (its credits came back), in no committed batch
        assert stream.acked == 0

        jvm = psutil.Process(first.pid).children(recursive=True)
        first.send_signal(signal.SIGKILL)  # while foreachBatch blocks: batch 0 written, not committed
        await first.wait()
        gone, alive = psutil.wait_procs(jvm, timeout=30)
        assert not alive, f"processes outlived the killed bridge: {alive}"

        second = await start_bridge(port, tmp_path, sink, "second")
        await wait_until(lambda: conn.stats.connections >= 2 and conn.connected, "the producer's new session", TIMEOUT,
                         every=0.1)  # fmt: skip
        # More records than credits: these sends return only after ACK frames of the new
        # session, so an ACK its HELLO may have brought is in by now.
        await send_epoch(stream, 3 * CREDITS)
        await wait_until(lambda: (sink / f"entered-0-{second.pid}").exists(),
                         "the restarted sink to hold batch 0 again", TIMEOUT, every=0.1)  # fmt: skip
        assert stream.acked == 0, "acked while the sink had not committed"

        # Drained with the batch held: the producer is sent away, the bridge waits for its own query.
        log = tmp_path / "log"
        drainer = await asyncio.create_subprocess_exec(
            *command("aqueduct-bridge"), "drain", "--log", str(log), "--json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        await wait_until(lambda: (read_state(log) or {}).get("state") == "draining", "the drain", TIMEOUT, every=0.1)
        waiting = (read_state(log) or {})["waiting"]
        assert waiting["records"] >= len(sent) and waiting["consumers"] == [DEFAULT_CONSUMER], waiting  # all of it
        await wait_until(lambda: not conn.connected, "the producer sent away", TIMEOUT, every=0.1)
        assert second.returncode is None and stream.acked == 0

        (sink / "hold").unlink()  # the sink returns: Spark commits everything, and the drained bridge exits
        assert await asyncio.wait_for(second.wait(), TIMEOUT) == 0, (tmp_path / "second.log").read_text()[-3000:]
        assert "drained: every record this bridge holds is committed" in (tmp_path / "second.log").read_text()
        code, stdout, stderr = await finish(drainer, TIMEOUT)
        assert code == 0, stderr
        assert (json.loads(stdout)["state"], json.loads(stdout)["sessions_ended"]) == ("drained", 1)

        third = await start_bridge(port, tmp_path, sink, "third", spark=False)  # started again on the log
        await conn.wait_all_acked(TIMEOUT)
        assert stream.acked == stream.next_id
        third.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(third.wait(), TIMEOUT) == 0, (tmp_path / "third.log").read_text()[-3000:]
    finally:
        (sink / "hold").unlink(missing_ok=True)
        await conn.close(flush_timeout=0)
        for proc in (first, second, third, drainer):
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()
        for p in jvm:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
    rows = read_rows(sink)
    assert sorted(r["message_id"] for r in rows) == sorted(sent)  # every record once
    assert {r["message_id"]: r["payload"] for r in rows} == sent  # with exactly its bytes
    batches_of_epoch: dict[int, set[int]] = defaultdict(set)
    for r in rows:
        batches_of_epoch[r["epoch"]].add(r["batch"])
    assert all(len(b) == 1 for b in batches_of_epoch.values()), batches_of_epoch
