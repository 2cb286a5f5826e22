"""The bridge end to end under faults: a real ``aqueduct-bridge serve`` process with Spark.

Each test starts ``aqueduct-bridge serve`` as a subprocess (its own Spark
JVM, Parquet sink, checkpoint), drives connectors at it, and checks the
Parquet output with ``verify_output``: only files Spark's sink log committed
count, every message exactly once, streams in order, no epoch split.

* crash: the bridge SIGKILLed at seeded random points during ingest, twice:
  with its JVM while Spark starts, then alone with a micro-batch planned
  (its JVM must die with it); restarted each time (the Spark query restarts
  from its checkpoint), while an ``aqueduct-produce`` process is SIGKILLed
  and restarted too; then everything drains;
* loss + load, on one bridge (a Spark start costs tens of seconds on two
  cores): connectors over ``aqueduct://`` through the seeded ``LossyProxy``
  (about 5 % loss with bursts, plus reordering, both directions) while 8
  connectors x 4 streams are held over TCP; the bridge's resident memory
  (psutil) must stay bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import psutil
import pytest

from aqueduct.connector.producer.client import Connector
from demo.producer import produce
from demo.verify import Verification, verify_output
from demo.workload import Workload
from interop.network import scenario
from interop.proxy import LossyProxy
from tests.ports import free_port
from tests.reliability.faults import Child, Figures, RssSampler, console_script, kill_points
from tests.reliability.injection import fault_env, faults_reached, kill_at_rename_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.skipif(shutil.which("java") is None, reason="needs a JVM for Spark: run `make java`"),
]

START_TIMEOUT = 180.0  # a Spark JVM start on a busy 2-core machine; only there to catch hangs
DRAIN_TIMEOUT = 240.0
MIB = 1024 * 1024
T = TypeVar("T")


class BridgeProcess:
    """``aqueduct-bridge serve`` in a subprocess, restartable on the same ports and directories."""

    def __init__(
        self, tmp: Path, certs, *, quic: bool = False, tcp: bool = False, args: tuple[str, ...] = (),
        env: dict[str, str] | None = None, own_session: bool = False,
    ) -> None:  # fmt: skip
        self.tmp = tmp
        self.quic_port = free_port(socket.SOCK_DGRAM) if quic else None
        self.tcp_port = free_port(socket.SOCK_STREAM) if tcp else None
        argv = [
            *console_script("aqueduct-bridge"), "serve",
            "--log", str(tmp / "log"), "--output", str(tmp / "out"),
            "--checkpoint", str(tmp / "checkpoint"),
            "--cert", str(certs.server_cert), "--key", str(certs.server_key),
            "--master", "local[2]", "--trigger-interval", "0.5", "--status-interval", "1",
            *args,
        ]  # fmt: skip
        if quic:
            argv += ["--quic", f"127.0.0.1:{self.quic_port}"]
        if tcp:
            argv += ["--tcp", f"127.0.0.1:{self.tcp_port}"]
        self.child = Child(
            argv, tmp / "bridge.log", env={"PYSPARK_PYTHON": sys.executable, **(env or {})}, own_session=own_session
        )
        self.starts = 0

    @property
    def output(self) -> Path:
        return self.tmp / "out"

    async def _accepting(self) -> bool:
        assert self.tcp_port is not None
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", self.tcp_port)
        except OSError:
            return False
        writer.close()
        return True

    async def start(self, query: bool = True) -> float:
        """Start; return the seconds until it is ready.

        Ready means the Spark query running (its line), or with
        ``query=False`` just accepting TCP connectors: the listeners come up
        before Spark, so ingest already runs while Spark starts.
        """
        began = time.monotonic()
        offset = self.child.log.stat().st_size if self.child.log.exists() else 0
        await self.child.start()
        self.starts += 1
        deadline = began + START_TIMEOUT
        while time.monotonic() < deadline:
            text = self.child.log.read_bytes()[offset:].decode(errors="replace")
            if "running (Spark started" in text or (not query and await self._accepting()):
                return time.monotonic() - began
            if not self.child.running:
                raise AssertionError(f"bridge exited during start:\n{text[-3000:]}")
            await asyncio.sleep(0.2)
        raise AssertionError(f"bridge not ready within {START_TIMEOUT} s:\n{self.child.output()[-3000:]}")

    def committed_batches(self) -> int:
        """Micro-batches the Spark query has committed (entries in its checkpoint's commit log)."""
        commits = self.tmp / "checkpoint" / "commits"
        return sum(1 for f in commits.iterdir() if f.name.isdigit()) if commits.is_dir() else 0

    async def wait_for_commit(self, beyond: int) -> None:
        """Wait until the query committed more than ``beyond`` micro-batches."""
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while self.committed_batches() <= beyond:
            assert self.child.running, self.child.output()[-3000:]
            assert time.monotonic() < deadline, "no micro-batch committed"
            await asyncio.sleep(0.2)

    def planned_batches(self) -> int:
        """Micro-batches the Spark query has planned (entries in its checkpoint's offset log)."""
        offsets = self.tmp / "checkpoint" / "offsets"
        return sum(1 for f in offsets.iterdir() if f.name.isdigit()) if offsets.is_dir() else 0

    async def batch_in_flight(self) -> None:
        """Until the query has planned a micro-batch it has not committed (its offsets written, no commit)."""
        while self.planned_batches() <= self.committed_batches():
            await asyncio.sleep(0.02)

    async def alive_while(self, awaitable: Awaitable[T], timeout: float) -> T:
        """Await ``awaitable``, failing at once if the bridge process exits meanwhile."""
        task = asyncio.ensure_future(awaitable)
        assert self.child.proc is not None
        exited = asyncio.ensure_future(self.child.proc.wait())
        try:
            await asyncio.wait({task, exited}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
        if task.done():
            return task.result()
        task.cancel()
        if not self.child.running:
            raise AssertionError(f"bridge exited:\n{self.child.output()[-3000:]}")
        raise TimeoutError(f"not done within {timeout} s")

    async def crash(self) -> None:
        await self.child.kill_tree()

    async def stop(self) -> None:
        await self.child.stop(timeout=60.0)


@contextlib.asynccontextmanager
async def bridge_process(tmp: Path, certs, **kwargs) -> AsyncIterator[BridgeProcess]:
    bridge = BridgeProcess(tmp, certs, **kwargs)
    try:
        yield bridge
    finally:
        await bridge.stop()


def record(figures: Figures, result: Verification) -> None:
    figures.sent, figures.in_sink = result.expected, result.rows
    figures.duplicates, figures.lost = result.duplicates, result.missing
    figures.extra.update(
        streams=result.streams,
        out_of_order_streams=result.out_of_order_streams,
        split_epochs=result.split_epochs,
        unexpected=result.unexpected,
    )


async def drain(bridge: BridgeProcess, expected: dict[int, dict[int, bytes]]) -> float:
    """Wait until Spark's sink holds as many rows as were sent; return the seconds waited.

    Producers finishing is not enough: after a reconnection the OK's points
    of reference cover what is *durable in the bridge's log*, so a producer
    may drop (and stop waiting for) messages Spark has not committed yet.
    """
    began = time.monotonic()
    want = sum(len(ids) for ids in expected.values())
    while time.monotonic() - began < DRAIN_TIMEOUT:
        result = await asyncio.to_thread(verify_output, bridge.output, expected)
        if result.rows >= want:
            break
        if not bridge.child.running:
            raise AssertionError(f"bridge died while draining:\n{bridge.child.output()[-3000:]}")
        await asyncio.sleep(1.0)
    return time.monotonic() - began


def assert_exactly_once(result: Verification, bridge: BridgeProcess) -> None:
    assert result.ok, (result.problems(), result.examples, bridge.child.output()[-3000:])
    assert result.duplicates == 0 and result.missing == 0 and result.rows == result.expected


def generated(stream_id: int, count: int, size: int = 100) -> dict[int, bytes]:
    """What ``aqueduct-produce --count`` sends on a stream: ``b"<stream>:<id> "`` padded with x to ``size``."""
    return {mid: (b"%d:%d " % (stream_id, mid)).ljust(size, b"x") for mid in range(count)}


async def supervise_producer(child: Child, rng: random.Random, kills: int, timeout: float) -> dict:
    """Run ``aqueduct-produce``, SIGKILL it ``kills`` times at seeded moments, then let it finish.

    A run that exits non-zero (the bridge was down longer than its connect
    timeout) is started again, as any supervisor would.
    """
    delays = kill_points(rng, kills, 1.0, 6.0)
    for delay in delays:
        await child.start()
        await asyncio.sleep(delay)
        await child.kill()
    deadline = time.monotonic() + timeout
    restarts = 0
    while True:
        offset = child.log.stat().st_size
        await child.start()
        status = await child.wait(max(1.0, deadline - time.monotonic()))
        if status == 0 or time.monotonic() > deadline or restarts >= 10:
            break
        restarts += 1
    last = child.log.read_bytes()[offset:].decode(errors="replace").strip().splitlines()
    return {"status": status, "kill_after_s": delays, "restarts_after_failure": restarts, "last": last[-1:]}


async def test_bridge_killed_twice_during_ingest_loses_and_duplicates_nothing(
    rng: random.Random, figures: Figures, tmp_path: Path, certs
) -> None:
    workload = Workload(producers=2, streams=2, events=3000, epoch=50)
    produce_count, produce_streams = 1500, 2  # aqueduct-produce: stream ids 0..1
    expected = {**workload.expected(), **{s: generated(s, produce_count) for s in range(produce_streams)}}
    crash_after = kill_points(rng, 2, 1.5, 6.0)
    batches_at_kill: list[int] = []
    figures.faults = {"bridge_kill_after_s": crash_after, "spark_batches_committed_at_each_kill": batches_at_kill}
    async with bridge_process(tmp_path, certs, tcp=True, args=("--max-lag", "400")) as bridge:
        startups = [await bridge.start(query=False)]
        url = f"tcp://127.0.0.1:{bridge.tcp_port}"
        producers = asyncio.gather(*(produce(url, workload, p, timeout=DRAIN_TIMEOUT) for p in range(2)))
        cli = Child(
            [
                *console_script("aqueduct-produce"), url,
                "--program", "killed-producer", "--instance", "kp-0",
                "--count", str(produce_count), "--streams", str(produce_streams), "--first-stream-id", "0",
                "--rate", "500", "--json", "--quiet", "--ack-timeout", str(DRAIN_TIMEOUT),
            ],  # fmt: skip
            tmp_path / "produce.log",
        )
        supervisor = asyncio.ensure_future(supervise_producer(cli, rng, 2, DRAIN_TIMEOUT))
        try:
            for i, delay in enumerate(crash_after):
                last = i == len(crash_after) - 1
                if last:
                    # The last crash lands while Spark is running micro-batches (after the
                    # first commit of this incarnation), not only during ingest ...
                    await bridge.wait_for_commit(beyond=bridge.committed_batches())
                await asyncio.sleep(delay)  # ingest running
                if last:  # ... at the worst moment: a batch planned, not committed, to be redone after the restart
                    with contextlib.suppress(TimeoutError):  # unless the producers ran dry: no batch comes
                        await asyncio.wait_for(bridge.batch_in_flight(), 30)
                    figures.extra["batch_in_flight_at_last_kill"] = bridge.planned_batches() > bridge.committed_batches()
                batches_at_kill.append(bridge.committed_batches())
                if last:  # the bridge alone: its Spark JVM and workers must die with it, releasing the checkpoint
                    family = psutil.Process(bridge.child.pid).children(recursive=True)
                    await bridge.child.kill()
                    _, alive = await asyncio.to_thread(psutil.wait_procs, family, timeout=30)
                    assert not alive, f"processes outlived the killed bridge: {alive}"
                else:
                    await bridge.crash()
                # The first crash lands while Spark is still starting (ingest runs
                # already); from then on each start waits for the query to be up.
                startups.append(await bridge.start())
            stats = await bridge.alive_while(producers, DRAIN_TIMEOUT)
            cli_summary = await bridge.alive_while(supervisor, DRAIN_TIMEOUT)
            drained_s = await drain(bridge, expected)
        finally:
            producers.cancel()
            supervisor.cancel()
            await cli.kill()
        await bridge.stop()
    result = verify_output(bridge.output, expected)
    record(figures, result)
    figures.faults.update(bridge_sigkill=len(crash_after), producer_sigkill=cli.kills, producer=cli_summary)
    figures.extra.update(
        bridge_starts=bridge.starts,
        bridge_start_s=[round(s, 1) for s in startups],
        drain_after_producers_s=round(drained_s, 1),
        resent=sum(s["resent"] for s in stats),
        connections=sum(s["connections"] for s in stats),
    )

    assert cli_summary["status"] == 0, cli.output()[-2000:]
    assert bridge.starts == 3 and cli.kills >= 2
    assert_exactly_once(result, bridge)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc) to build the rename hook")
async def test_killed_at_the_sources_commit_file_then_the_jvm_at_sparks_commit_rename_restarts_exactly_once(
    figures: Figures, tmp_path: Path, certs
) -> None:
    """Real kills in the middle of both checkpoint writes of a micro-batch, one after the other, on one log.

    1. **The source's commit file** (``LOG/commits/<consumer>.json``): the
       Python process writing it (one Spark started) stops itself once the
       new content is on disk under its temporary name, before the rename
       (``inject/sitecustomize.py``); the test then SIGKILLs the bridge and
       everything it started, as a machine crash would at that moment. A
       connector sends throughout, so micro-batches keep coming (the source
       writes a batch's commit file when the next one runs).
    2. **Spark's own checkpoint**, in the restarted bridge: Spark writes
       each entry to a temporary file and renames it into place. A
       preloaded hook (``inject/kill_at_rename.c``) SIGKILLs the JVM when it
       calls the ``rename`` that would publish the restarted query's first
       ``commits/N``: the batch is in the sink, its commit not recorded,
       nothing of it acked yet. ``serve`` sees its JVM die and exits by
       itself. (A kill at ``offsets/N`` differs only in the batch being
       planned again: the same restart path.)

    After the second restart the batch is run again with the same offsets,
    and every record is in the sink once with its payload, every one acked.
    Both kills share one bridge: a Spark start costs tens of seconds on two cores.
    """
    sent: dict[int, bytes] = {}
    stop = asyncio.Event()
    commits = tmp_path / "checkpoint" / "commits"
    commit_file_mark, rename_mark = tmp_path / "commit-file-fault", tmp_path / "rename-fault"
    async with bridge_process(tmp_path, certs, tcp=True) as bridge:
        plain_env = dict(bridge.child.env)
        bridge.child.env = plain_env | fault_env("commit-file:1", commit_file_mark, log=tmp_path / "log")
        await bridge.start(query=False)
        sender = asyncio.ensure_future(send_steadily(bridge, sent, stop, pause=0.005))
        try:
            await bridge.alive_while(wait_for_file(commit_file_mark), DRAIN_TIMEOUT)  # the write reached its rename
            torn = sorted(p.name for p in (tmp_path / "log" / "commits").iterdir())
            await bridge.crash()

            # the restarted query's first commit: the batch left uncommitted, run again, or the next one
            entry = commits / str(max((int(p.name) for p in commits.iterdir() if p.name.isdigit()), default=-1) + 1)
            bridge.child.env = plain_env | kill_at_rename_env(entry, rename_mark, tmp_path)
            await bridge.start(query=False)
            status = await bridge.child.wait(DRAIN_TIMEOUT)  # serve exits once its JVM was killed
            leftovers = sorted(p.name for p in commits.iterdir() if p.name.endswith(".tmp"))
            assert status != 0 and not entry.exists(), (status, bridge.child.output()[-3000:])
            await bridge.crash()  # anything the JVM's death left running
            bridge.child.env = plain_env
            expected = await resume_and_drain(bridge, sender, stop, sent)
        finally:
            stop.set()
            sender.cancel()
    result = verify_output(bridge.output, expected)
    record(figures, result)
    figures.faults = {
        "sigkill_during_commit_file_write": faults_reached(commit_file_mark), "commit_files_at_kill": torn,
        "jvm_sigkill_at_rename_of": faults_reached(rename_mark), "temporary_files_left": leftovers,
    }  # fmt: skip
    assert_exactly_once(result, bridge)
    assert any(name.endswith(".json.tmp") for name in torn), torn  # killed with the source's new content unpublished
    assert len(faults_reached(rename_mark)) == 1, faults_reached(rename_mark)  # the JVM's kill came at the rename
    assert leftovers, leftovers  # and left Spark's entry unpublished


async def send_steadily(bridge: BridgeProcess, sent: dict[int, bytes], stop: asyncio.Event, pause: float) -> None:
    """One connector sending on stream 1 until ``stop`` (each record noted in ``sent``), then waiting for every ACK.

    The pause paces it, so micro-batches keep coming while Spark runs and a
    kill always finds records in flight.
    """
    url = f"tcp://127.0.0.1:{bridge.tcp_port}"
    async with Connector(url, program="p", instance="i", backoff=(0.05, 0.5)) as conn:
        stream = await conn.stream(1, "sent-through-kills")
        while not stop.is_set():
            sent[len(sent)] = b"message %d" % len(sent)
            await stream.send(sent[len(sent) - 1])
            await asyncio.sleep(pause)
        await conn.wait_all_acked(DRAIN_TIMEOUT)


async def resume_and_drain(
    bridge: BridgeProcess, sender: asyncio.Future[None], stop: asyncio.Event, sent: dict[int, bytes]
) -> dict[int, dict[int, bytes]]:
    """After a kill: start ``bridge`` again, let its query commit, stop the sender once every record
    it sent is acked, wait until the sink holds them and stop the bridge; returns what was sent."""
    await bridge.start()
    await bridge.wait_for_commit(beyond=bridge.committed_batches())  # the restarted query commits
    stop.set()
    await bridge.alive_while(sender, DRAIN_TIMEOUT)
    expected = {1: dict(sent)}
    await drain(bridge, expected)
    await bridge.stop()
    return expected


async def wait_for_file(path: Path) -> None:
    """Until ``path`` exists (bounded by the caller)."""
    while not path.exists():
        await asyncio.sleep(0.05)


def held_payload(stream_id: int, message_id: int) -> bytes:
    return b"load %d %d" % (stream_id, message_id)


async def hold_connector(url: str, index: int, streams: int, until: float, rate: float) -> dict[int, int]:
    """One connector: send round-robin on its streams at ``rate`` until ``until``; all acked.

    Returns how many messages each stream sent (ids ``0..n-1``).
    """
    async with Connector(url, program="load", instance=f"c{index}") as conn:
        handles = [await conn.stream(100 * (index + 1) + s, f"load/c{index}/s{s}") for s in range(streams)]
        n = 0
        loop = asyncio.get_running_loop()
        start = loop.time()
        while loop.time() < until and n < 1_000_000:
            stream = handles[n % streams]
            await stream.send(held_payload(stream.stream_id, n // streams), message_id=n // streams)
            n += 1
            delay = start + n / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
        await conn.wait_all_acked(DRAIN_TIMEOUT)
    return {stream.stream_id: len(range(i, n, streams)) for i, stream in enumerate(handles)}


async def test_exactly_once_under_loss_reordering_and_load_with_bounded_memory(
    seed: int, figures: Figures, tmp_path: Path, certs
) -> None:
    """One bridge, two kinds of trouble at once (one Spark start instead of two).

    * 2 producers x 2 streams over ``aqueduct://`` through the lossy proxy;
    * 8 connectors x 4 streams over TCP, held for ``hold`` seconds.
    """
    lossy_load = Workload(producers=2, streams=2, events=800, epoch=40)
    connectors, streams, hold, rate = 8, 4, 15.0, 60.0  # rate: messages/s per connector
    base = scenario("loss", seed)
    link = replace(base.client_to_server, reorder_rate=0.05, reorder_gap=3, jitter=0.002)
    network = replace(base, client_to_server=link, server_to_client=link)
    async with bridge_process(tmp_path, certs, quic=True, tcp=True, args=("--max-lag", "2000")) as bridge:
        startup = await bridge.start()
        assert bridge.quic_port is not None
        bridge_only = RssSampler(bridge.child.pid, children=False)
        baseline = bridge_only.rss()
        tree = RssSampler(bridge.child.pid)  # bridge plus its JVM and Python workers
        bridge_only.start()
        tree.start()
        tcp_url = f"tcp://127.0.0.1:{bridge.tcp_port}"
        until = asyncio.get_running_loop().time() + hold
        try:
            async with LossyProxy(("127.0.0.1", 0), ("127.0.0.1", bridge.quic_port), network) as proxy:
                quic_url = f"aqueduct://127.0.0.1:{proxy.address[1]}"
                lossy = [
                    produce(quic_url, lossy_load, p, cafile=str(certs.ca), timeout=DRAIN_TIMEOUT)
                    for p in range(lossy_load.producers)
                ]
                held = [hold_connector(tcp_url, c, streams, until, rate) for c in range(connectors)]
                results = await bridge.alive_while(asyncio.gather(*lossy, *held), hold + DRAIN_TIMEOUT)
                counts = {f"{d}.{a}": n for (d, a), n in sorted(proxy.counts.items())}
            stats, parts = results[: lossy_load.producers], results[lossy_load.producers :]
            expected = {**lossy_load.expected()}
            for part in parts:
                expected.update({sid: {m: held_payload(sid, m) for m in range(n)} for sid, n in part.items()})
            drained_s = await drain(bridge, expected)
        finally:
            await bridge_only.stop()
            await tree.stop()
        await bridge.stop()
    result = verify_output(bridge.output, expected)
    record(figures, result)
    dropped = sum(n for k, n in counts.items() if k.endswith(".drop"))
    datagrams = sum(n for k, n in counts.items() if not k.endswith(".release"))
    samples = bridge_only.samples
    third = max(1, len(samples) // 3)
    early, late = max(samples[:third]), max(samples[-third:])
    figures.faults = {
        "datagrams": datagrams,
        "dropped": dropped,
        "held_for_reordering": sum(n for k, n in counts.items() if k.endswith(".hold")),
        "proxy": counts,
        "load": f"{connectors} connectors x {streams} streams for {hold} s",
    }
    figures.extra.update(
        bridge_start_s=round(startup, 1),
        drain_after_producers_s=round(drained_s, 1),
        lossy_messages=lossy_load.total,
        load_messages=sum(sum(p.values()) for p in parts),
        quic_resent=sum(s["resent"] for s in stats),
        bridge_rss_baseline_mib=round(baseline / MIB),
        bridge_rss_peak_mib=round(bridge_only.peak / MIB),
        bridge_rss_early_peak_mib=round(early / MIB),
        bridge_rss_late_peak_mib=round(late / MIB),
        tree_rss_peak_mib=round(tree.peak / MIB),
    )

    assert_exactly_once(result, bridge)
    assert result.streams == lossy_load.producers * lossy_load.streams + connectors * streams
    assert dropped >= datagrams * 0.01  # the network really was lossy
    # Bounded: the bridge process (log writer, ingest, sessions) grows by a bounded amount
    # under sustained load, and the last third of the run does not keep growing.
    assert bridge_only.peak - baseline < 400 * MIB
    assert late <= early + 64 * MIB


