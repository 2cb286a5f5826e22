"""SIGKILL while the log commits and truncates: every restart finds a whole log.

A real writer process (tests/reliability/truncating_writer.py) commits a
batch per stream and truncates below all but its last 50 records, over and
over, and is SIGKILLed at seeded moments; each restart recovers the log
and checks it (contiguous retained ids with their payloads, the newest and the truncated ones
still refused as duplicates) before going on. Afterwards every id a run
reported durable is either retained, with the payload it was written
with, or below what was truncated.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

from aqueduct.bridge.storage.log import DurableLog
from tests.reliability.faults import Child, Figures, kill_points
from tests.reliability.truncating_writer import payload
from tests.stored import stored

TIMEOUT = 60.0


def reported(output: str) -> dict[int, int]:
    """The highest id each stream's runs reported durable."""
    last: dict[int, int] = {}
    for line in output.splitlines():
        if line.startswith("COMMITTED "):
            _, sid, end = line.split()
            last[int(sid)] = max(last.get(int(sid), -1), int(end))
    return last


async def test_sigkill_during_commits_and_truncations_leaves_a_whole_log(
    tmp_path: Path, rng: random.Random, figures: Figures
) -> None:
    log_dir, out = tmp_path / "log", tmp_path / "writer.log"
    writer = Child([sys.executable, "-m", "tests.reliability.truncating_writer", str(log_dir)], out)
    delays = kill_points(rng, 6, 0.3, 1.5)
    for delay in delays:
        await writer.start()
        for _ in range(int(TIMEOUT / 0.05)):  # recovered, checked and writing again
            if writer.output().count("RECOVERED") == writer.kills + 1 and "COMMITTED" in writer.output():
                break
            assert writer.running, writer.output()[-2000:]
            await asyncio.sleep(0.05)
        await asyncio.sleep(delay)
        assert writer.running, writer.output()[-2000:]
        await writer.kill()
    durable = reported(writer.output())
    with DurableLog(log_dir) as log:
        for sid, last in durable.items():
            rows = stored(log, sid)
            first = rows[0][0]
            assert rows == [(m, payload(m)) for m in range(first, first + len(rows))]  # no gap, no repeat, intact
            ids = [m for m, _ in rows]
            assert ids[-1] >= last  # nothing reported durable is missing above the truncation
            assert all(log.is_duplicate(sid, m) for m in range(0, last + 1, 97))
    figures.faults = {"sigkill_after_s": delays}
    figures.extra = {"durable_ids": durable}
    figures.sent = figures.in_sink = sum(v + 1 for v in durable.values())
