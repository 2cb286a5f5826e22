"""The real bridge with its log on a small tmpfs that fills under load and is freed: it rides it out.

``aqueduct-bridge serve`` runs in a private mount namespace (``unshare -m``,
as root) with its log on a 8 MiB tmpfs there; Spark's checkpoint and
Parquet output are on ordinary disk. The test fills the tmpfs from inside
that namespace (``nsenter -m``) while producers send, then frees it: the
same bridge process ends with every message exactly once in the sink and
acked, without a restart. Skipped, with the reason, where the machine
refuses the namespace or the mount.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import pytest

from demo.producer import produce
from demo.verify import verify_output
from demo.workload import Workload
from tests.ports import free_port
from tests.reliability.ingest_child import in_namespace, small_disk_dir
from tests.spark.serve_process import TIMEOUT, bridge_command
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def caught_up_while_full(output: str) -> bool:
    """A status line (written when a figure changed) says the disk is full and nothing is left to commit.

    Spark then committed all it could read while the disk was full: any ACK
    those commits could bring was decided.
    """
    return any("LOG DISK FULL" in line and "| lag 0 |" in line for line in output.splitlines())


async def test_a_full_log_disk_is_ridden_out_by_the_running_bridge(tmp_path: Path) -> None:
    small = small_disk_dir(tmp_path)
    port = free_port(socket.SOCK_STREAM)
    command = bridge_command(port, tmp_path)
    command[command.index("--log") + 1] = str(small / "log")
    script = f'mount -t tmpfs -o size=8m tmpfs "{small}" && exec "$@"'
    log_file = tmp_path / "bridge.log"
    with open(log_file, "wb") as out:
        proc = await asyncio.create_subprocess_exec(
            "unshare", "-m", "sh", "-c", script, "sh", *command, stdout=out, stderr=out
        )
    workload = Workload(producers=2, streams=2, events=3000, epoch=50)
    url = f"tcp://127.0.0.1:{port}"
    try:
        for _ in range(int(TIMEOUT / 0.2)):  # listening (Spark may still be starting)
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            assert proc.returncode is None, log_file.read_text()[-3000:]
            await asyncio.sleep(0.2)
        producers = asyncio.gather(*(produce(url, workload, p, timeout=TIMEOUT) for p in range(2)))
        await wait_until(
            lambda: (tmp_path / "out" / "_checkpoint" / "commits" / "0").exists(), "a first micro-batch", TIMEOUT, every=0.25
        )
        filled = in_namespace(proc.pid, "dd", "if=/dev/zero", f"of={small}/filler", "bs=64k")
        assert "No space left on device" in filled.stderr, filled.stderr
        await wait_until(
            lambda: "LOG DISK FULL" in log_file.read_text(), "the bridge to report the full disk", TIMEOUT, every=0.25
        )
        # Their chance to end wrongly (an ACK of what is not durable) came and went: Spark
        # committed everything complete while the disk was full.
        await wait_until(
            lambda: caught_up_while_full(log_file.read_text()), "Spark to catch up while the disk is full", TIMEOUT, every=0.25
        )
        assert proc.returncode is None and not producers.done()  # up, and producers held back
        freed = in_namespace(proc.pid, "rm", f"{small}/filler")
        assert freed.returncode == 0, freed.stderr
        await asyncio.wait_for(producers, TIMEOUT)  # every message acked
        await wait_until(lambda: verify_output(tmp_path / "out", workload.expected()).rows >= workload.total,
                         "every row in the sink", TIMEOUT, every=0.25)  # fmt: skip
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), TIMEOUT) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    result = verify_output(tmp_path / "out", workload.expected())
    assert result.ok, result.problems()
    text = log_file.read_text()
    assert text.count("no credits are granted until it is durable, retrying") == 1
    assert text.count("the log's disk has room again: group commits go on") == 1
    assert "Traceback" not in text
