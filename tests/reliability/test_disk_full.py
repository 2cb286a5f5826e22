"""A full log disk is ridden out: credits stop, nothing durable is lost, commits resume by themselves.

The log lives on a real tmpfs of 4 MiB mounted in a private mount
namespace (``unshare -m``, as root), so filling it affects nothing else on
the machine. The ingest runs in that namespace
(``tests/reliability/small_disk_bridge.py``); producers are real
connectors over loopback TCP.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from aqueduct.connector.producer.client import Connector
from tests.reliability.faults import Figures, tally
from tests.reliability.ingest_child import TIMEOUT, IngestChild, namespace_refusal


async def test_a_full_log_disk_holds_credits_then_resumes_with_everything_exactly_once(
    tmp_path: Path, figures: Figures
) -> None:
    mount = tmp_path / "small"
    mount.mkdir()
    reason = namespace_refusal(mount)
    if reason:
        pytest.skip(reason)
    stderr = tmp_path / "bridge.log"
    bridge = await IngestChild.start(["--mount", str(mount), "--size", "4m"], stderr, prefix=["unshare", "-m"])
    streams, per_stream = (1, 2), 3000
    payload = b"x" * 200
    try:
        async with Connector(f"tcp://127.0.0.1:{bridge.ports[0]}", program="p", instance="full") as conn:
            handles = [await conn.stream(sid, f"s{sid}") for sid in streams]

            async def send(first: int, stop: int) -> None:
                for i in range(first, stop):
                    for h in handles:
                        await h.send(payload + b"%d" % i)

            await send(0, 500)
            await bridge.until("a first part durable", lambda r: all(r["durable"].get(str(s), 0) >= 300 for s in streams))
            filled = await bridge.ask("fill")
            sender = asyncio.create_task(send(500, per_stream))
            full = await bridge.until("the bridge to notice the full disk", lambda r: r["disk_full"])
            # The producer's chance to get credits for what is not durable: two more group commits
            # (retries, refused), while it runs out of the credits it had; the bridge stays up.
            during = await bridge.until("two retries of the refused group commit",
                                        lambda r: r["group_commits"] >= full["group_commits"] + 2)  # fmt: skip
            assert bridge.proc.returncode is None
            assert not sender.done()  # held back: no credits while nothing becomes durable
            await bridge.ask("free")
            await asyncio.wait_for(sender, TIMEOUT)
            await conn.wait_all_acked(TIMEOUT)
            after = await bridge.ask("report")
        stored = await bridge.stop()
    finally:
        await bridge.kill()
    t = tally({s: {i: payload + b"%d" % i for i in range(per_stream)} for s in streams}, stored)
    figures.count(t)
    figures.faults = {"filled_bytes": filled["filled"], "disk_full": full["disk_full"]}
    figures.extra = {"durable_while_full": during["durable"], "durable_after": after["durable"]}
    assert t.exactly_once, t
    assert after["disk_full"] is None
    err = stderr.read_text()
    assert err.count("no credits are granted until it is durable, retrying") == 1, err
    assert err.count("the log's disk has room again: group commits go on") == 1, err
    assert "No space left on device" in full["disk_full"] and "Traceback" not in err
