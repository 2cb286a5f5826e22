"""The failover tests' own part of the fleet (:mod:`bench.fleet_processes`): the query as a driver on a cluster.

:class:`DriverQuery` runs the user's query in a driver process
(``failover_driver.py``) on the standalone cluster of the cluster tests,
over a bridge list file; :func:`start_driver` makes it a fleet's query.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from bench.fleet_processes import TIMEOUT, FailoverQuery, Fleet, tail
from tests.spark.standalone import DIE_WITH_THE_TESTS, cluster_env


class DriverQuery(FailoverQuery):
    """The query in a driver process on a standalone cluster (``failover_driver.py``), over a bridge list file."""

    def __init__(self, root: Path, proc: asyncio.subprocess.Process, stderr: Path, stop_file: Path) -> None:
        super().__init__(root)
        self.proc, self.stderr, self.stop_file = proc, stderr, stop_file

    @classmethod
    async def start(cls, master: str, bridge_list: Path, root: Path) -> DriverQuery:
        """The driver started, once its query runs."""
        stderr, stop_file = root / "driver.log", root / "STOP"
        with open(stderr, "ab") as out:
            proc = await asyncio.create_subprocess_exec(
                *DIE_WITH_THE_TESTS, sys.executable, str(Path(__file__).with_name("failover_driver.py")), master,
                str(bridge_list), str(root / "out"), str(root / "checkpoint"), str(stop_file),
                stdout=out, stderr=out, env=cluster_env(),
            )  # fmt: skip
        query = cls(root, proc, stderr, stop_file)
        deadline = time.monotonic() + TIMEOUT
        while "query started" not in stderr.read_text(errors="replace"):
            query.alive()
            assert time.monotonic() < deadline, f"the driver's query did not start: {tail(stderr)}"
            await asyncio.sleep(0.25)
        return query

    def alive(self) -> None:
        assert self.proc.returncode is None, f"the driver exited ({self.proc.returncode}): {tail(self.stderr)}"

    async def stop(self) -> None:
        """The stop file, then the driver's own exit: 0 when its query was alive to the end."""
        if self.proc.returncode is None:
            self.stop_file.write_text("stop")
            try:
                await asyncio.wait_for(self.proc.wait(), TIMEOUT)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()



async def start_driver(fleet: Fleet, master: str, bridge_list: Path) -> FailoverQuery:
    """``fleet``'s query in a driver process on the cluster at ``master``, over the bridges of ``bridge_list``."""
    fleet.query = await DriverQuery.start(master, bridge_list, fleet.root)
    return fleet.query
