"""``aqueduct_log_disk_full`` of a real bridge whose log's disk fills: 1 while writes are refused, 0 after.

Refused writes of both kinds: a new stream whose files cannot be made (its
producer is asked to reconnect), then group commits (retried, credits held).

``aqueduct-bridge serve --ingest-only`` (no Spark) runs in a private mount
namespace (``unshare -m``, as root) with its log on a 4 MiB tmpfs there.
The test fills that tmpfs from inside the namespace (``nsenter -m``)
while a real producer sends over TCP, reads ``/metrics`` over HTTP, then
frees the space. Skipped, with the reason, where the machine refuses the
namespace or the mount.
"""

from __future__ import annotations

import asyncio
import re
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from aqueduct.connector.producer.client import Connector
from tests.reliability.ingest_child import in_namespace, small_disk_dir

TIMEOUT = 60.0  # only turns a hang into a failure
ROOT = Path(__file__).resolve().parents[2]
#: fills the tmpfs (run inside the bridge's mount namespace): ``small_disk_bridge.fill``
FILL = "import sys; from pathlib import Path; from tests.reliability.small_disk_bridge import fill; fill(Path(sys.argv[1]))"


async def until(what: str, check: Callable[[], object], proc: asyncio.subprocess.Process, err: Path) -> object:
    for _ in range(int(TIMEOUT / 0.05)):
        found = check()
        if found:
            return found
        assert proc.returncode is None, err.read_text()[-3000:]
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}: {err.read_text()[-3000:]}")


def sample(metrics: str, name: str) -> float:
    """One unlabelled series' value, read from the bridge's /metrics over HTTP."""
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=TIMEOUT) as response:
        text = response.read().decode()
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def disk_full(metrics: str) -> float:
    return sample(metrics, "aqueduct_log_disk_full")


async def test_the_disk_full_gauge_is_1_while_the_log_cannot_write_and_0_once_it_can(tmp_path: Path) -> None:
    small = small_disk_dir(tmp_path)
    serve = [
        sys.executable, "-m", "aqueduct.bridge.app.cli", "serve", "--ingest-only", "--tcp", "127.0.0.1:0",
        "--metrics", "127.0.0.1:0", "--log", str(small / "log"), "--status-interval", "0.2",
    ]  # fmt: skip
    script = f'mount -t tmpfs -o size=4m tmpfs "{small}" && exec "$@"'
    err = tmp_path / "bridge.log"
    with err.open("wb") as out:
        proc = await asyncio.create_subprocess_exec("unshare", "-m", "sh", "-c", script, "sh", *serve, stderr=out)
    try:
        tcp = await until("the TCP listener", lambda: re.search(r"TCP 127\.0\.0\.1:(\d+)", err.read_text()), proc, err)
        metrics = await until("the metrics endpoint", lambda: re.search(r"metrics at http://([\d.:]+)/", err.read_text()),
                              proc, err)  # fmt: skip
        address = metrics.group(1)  # type: ignore[attr-defined]
        assert await asyncio.to_thread(disk_full, address) == 0
        async with Connector(f"tcp://127.0.0.1:{tcp.group(1)}", program="p", instance="full") as conn:  # type: ignore[attr-defined]
            s = await conn.stream(1, "s")
            await s.send_many([b"before"] * 100)
            await until("the first records durable (the stream's files made)",
                        lambda: sample(address, "aqueduct_records_durable_total") >= 100, proc, err)  # fmt: skip
            filled = in_namespace(proc.pid, sys.executable, "-c", FILL, str(small), env={"PYTHONPATH": str(ROOT)})
            assert filled.returncode == 0, filled.stderr
            async with Connector(f"tcp://127.0.0.1:{tcp.group(1)}", program="p", instance="late") as late:  # type: ignore[attr-defined]
                # A new stream on the full disk, nothing buffered for a group commit to find it full:
                # its files cannot be made, its producer is asked to reconnect, and the gauge says why.
                new = await late.stream(2, "new")
                await new.send(b"first of a new stream")
                await until("the gauge to say a new stream found the disk full", lambda: disk_full(address) == 1,
                            proc, err)  # fmt: skip
                assert "stream 2 of p/late: cannot create its files" in err.read_text()
                sender = asyncio.create_task(s.send_many([b"x" * 200] * 2000))  # held back once credits stop
                await until("a group commit to find the disk full",
                            lambda: "no credits are granted until it is durable" in err.read_text(), proc, err)  # fmt: skip
                assert disk_full(address) == 1
                freed = in_namespace(proc.pid, "rm", str(small / "filler"))
                assert freed.returncode == 0, freed.stderr
                await until("the gauge to say the disk has room", lambda: disk_full(address) == 0, proc, err)
                await asyncio.wait_for(sender, TIMEOUT)
                await until("the new stream's record durable once its files were made",
                            lambda: sample(address, "aqueduct_records_durable_total") >= 100 + 2000 + 1, proc, err)  # fmt: skip
        assert "the log's disk has room again" in err.read_text()
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), TIMEOUT) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
