"""A fleet of real processes for failover: ingest-only bridges, producers that know all of them, one query.

What ``bench.failover`` measures and the failover tests (tests/spark,
tests/integration) check, run the same way by both:

- :class:`FleetBridge`: one ``aqueduct-bridge serve --ingest-only`` process
  (TCP listener, optionally QUIC, log, Flight server), on ports outside the
  ephemeral range (:func:`bench.processes.free_port`) so it can come back
  on the same numbers; killed, stopped, restarted and drained as an
  operator would.
- :class:`Partition`: a TCP relay in front of a bridge's listener; cut, it
  resets the producers' connections and stops accepting new ones, while the
  bridge itself (and its Flight server, which the query reaches directly)
  runs on.
- :class:`FleetProducer`: one producer, an in-process
  :class:`~aqueduct.connector.Connector` given several bridges' URLs, sending
  its share of a :class:`~demo.workload.Workload` and measuring its longest
  ACK stall: the longest time it held unacked records without any ACK.
- :class:`FailoverQuery`: the user's query, one stream per stream id across
  every bridge (``failover=true``, the bridges named in options or in a
  bridge list file), into a Parquet sink that :func:`demo.verify.verify_output`
  reads: every (stream id, message id) once with its payload, in id order,
  epochs whole. :class:`SessionQuery` runs it on a SparkSession of this
  process; a test may run it elsewhere (a driver on a cluster).
- :class:`Fleet`: one run's bridges, producers and query, a fault injected
  under load (:meth:`Fleet.fault`) and the :class:`Verdict` every run ends
  with; :func:`lose_a_bridge` is issue 36's first test, which
  ``bench.failover`` repeats to measure the ACK stall.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aqueduct.bridge.app.config import BridgeConfig
from aqueduct.connector import Connector
from bench.processes import DIE_WITH_THE_PARENT, free_port
from demo.producer import PROGRAM, send_share
from demo.sinkfiles import read_committed
from demo.verify import Verification, verify_output
from demo.workload import Workload

TIMEOUT = 180.0  # seconds: only turns a hang into a failure
#: how often a producer's ACK stall is sampled: the stall's resolution
STALL_SAMPLE = 0.05


def bridge_program() -> list[str]:
    """``aqueduct-bridge`` of this interpreter's environment (or the module, where no script is installed)."""
    script = Path(sys.executable).with_name("aqueduct-bridge")
    return [str(script)] if script.exists() else [sys.executable, "-m", "aqueduct.bridge.app.cli"]


def tail(path: Path, chars: int = 3000) -> str:
    """The last ``chars`` characters of a process's output file, for a failure message."""
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


@dataclass
class FleetBridge:
    """One ingest-only bridge process; its log under ``root/log``, its stderr in ``root/bridge.log`` (kept).

    ``credits`` is its ``--credits`` (None: the bridge's default), few by
    default, the rest of its settings the bridge's defaults. ``quic_port``:
    a QUIC listener too.
    """

    name: str
    root: Path
    credits: int | None = 64
    tcp_port: int = field(default_factory=free_port)
    flight_port: int = field(default_factory=free_port)
    quic_port: int | None = None
    proc: asyncio.subprocess.Process | None = None

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def stderr(self) -> Path:
        return self.root / "bridge.log"

    @property
    def url(self) -> str:
        """Its TCP listener's URL."""
        return f"tcp://127.0.0.1:{self.tcp_port}"

    def url_for(self, scheme: str) -> str:
        """The URL of its ``tcp`` listener, or of its QUIC one (``aqueduct``, with ``quic_port``)."""
        if scheme == "tcp":
            return self.url
        assert scheme == "aqueduct" and self.quic_port is not None, f"bridge {self.name} has no {scheme}:// listener"
        return f"aqueduct://127.0.0.1:{self.quic_port}"

    @property
    def flight(self) -> str:
        return f"127.0.0.1:{self.flight_port}"

    @property
    def token_file(self) -> Path:
        return self.log_dir / "tls" / "flight.token"

    @property
    def ca(self) -> Path:
        return self.log_dir / "tls" / "ca.pem"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def durable(self) -> int:
        """Records durable in its log, as its latest status line says (one a second)."""
        counts = re.findall(r"\| durable ([\d,]+) \|", self.stderr.read_text(errors="replace"))
        return int(counts[-1].replace(",", "")) if counts else 0

    def command(self) -> list[str]:
        argv = [
            *bridge_program(), "serve", "--ingest-only", "--tcp", f"127.0.0.1:{self.tcp_port}",
            "--log", str(self.log_dir), "--flight", self.flight, "--status-interval", "1",
        ]  # fmt: skip
        if self.quic_port is not None:
            argv += ["--quic", f"127.0.0.1:{self.quic_port}"]
        if self.credits is not None:
            argv += ["--credits", str(self.credits)]
        return argv

    async def start(self) -> None:
        """Start the process and return once it serves its log over Flight (its listeners are up before)."""
        self.root.mkdir(parents=True, exist_ok=True)
        seen = self.stderr.read_text(errors="replace").count("log served over Flight") if self.stderr.exists() else 0
        with open(self.stderr, "ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *DIE_WITH_THE_PARENT, *self.command(), stdout=out, stderr=out
            )
        deadline = time.monotonic() + TIMEOUT
        while self.stderr.read_text(errors="replace").count("log served over Flight") <= seen:
            if self.proc.returncode is not None or time.monotonic() > deadline:
                raise AssertionError(f"bridge {self.name} did not start: {tail(self.stderr)}")
            await asyncio.sleep(0.1)

    async def kill(self, *, lose_log: bool = False) -> None:
        """SIGKILL; with ``lose_log`` its log directory is deleted too (the disk is gone, not just the process)."""
        assert self.proc is not None and self.proc.returncode is None, f"bridge {self.name} is not running"
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()
        if lose_log:
            shutil.rmtree(self.log_dir)

    async def stop(self) -> int | None:
        """SIGTERM and its exit status (killed after a minute); None if it was not running."""
        if not self.running:
            return None
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.proc.wait(), 60)
        except TimeoutError:
            self.proc.kill()
            return await self.proc.wait()

    async def drain(self) -> int:
        """``aqueduct-bridge drain`` as an operator runs it; the bridge's exit status once it drained."""
        assert self.proc is not None and self.proc.returncode is None, f"bridge {self.name} is not running"
        asked = await asyncio.create_subprocess_exec(
            *bridge_program(), "drain", "--log", str(self.log_dir),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        said, _ = await asyncio.wait_for(asked.communicate(), TIMEOUT)
        assert asked.returncode == 0, said.decode(errors="replace")
        return await asyncio.wait_for(self.proc.wait(), TIMEOUT)

    def status(self) -> dict[str, Any]:
        """``aqueduct-bridge status --json`` of its log (safe while it runs)."""
        out = subprocess.run(
            [*bridge_program(), "status", "--log", str(self.log_dir), "--json"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return json.loads(out.stdout)


class Partition:
    """A TCP relay to a bridge's listener; :meth:`cut` makes the bridge unreachable for producers only.

    Producers dial :attr:`url`. Cut, the relay resets every connection it
    carries (on both sides, as a firewall rule rejecting the flow would) and
    closes its listener, so a producer trying again finds nobody there;
    the bridge and its Flight server (which the query reaches directly)
    are untouched.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.relayed = 0  # connections relayed so far
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self.relayed += 1
        self._writers |= {writer, up_writer}
        pipes = {asyncio.create_task(_pipe(reader, up_writer)), asyncio.create_task(_pipe(up_reader, writer))}
        self._pipes |= pipes
        await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        for w in (writer, up_writer):
            w.transport.abort()
            self._writers.discard(w)
        for task in pipes:
            task.cancel()
        self._pipes -= pipes

    async def cut(self) -> None:
        """Reset every relayed connection and refuse new ones."""
        assert self._server is not None
        self._server.close()
        for w in list(self._writers):
            w.transport.abort()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        await self._server.wait_closed()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()


@dataclass
class AckStall:
    """The longest time a producer held unacked records while no ACK arrived, sampled every ``STALL_SAMPLE`` s.

    Counted from its first ACK (the wait for the query to start is no
    stall); :meth:`mark` keeps the longest until then in ``before_fault``,
    the pace of ACKs the fault is measured against.
    """

    longest: float = 0.0
    last_ack: float = field(default_factory=time.monotonic)
    acked: int = 0
    before_fault: float = 0.0

    def mark(self) -> None:
        """Count only stalls still going on now or later (a stall under way counts whole): the fault comes now."""
        self.before_fault, self.longest = self.longest, 0.0

    def delivered(self, error: Exception | None, _delivery: object) -> None:
        """The connector's delivery callback: an ACK (``error`` None) is progress."""
        if error is None:
            if not self.acked:
                self.longest = 0.0
            self.acked += 1
            self.last_ack = time.monotonic()

    async def watch(self, conn: Connector) -> None:
        """Sample until cancelled: a producer with nothing unacked is idle, not stalled."""
        while True:
            now = time.monotonic()
            if conn.unacked == 0:
                self.last_ack = now
            self.longest = max(self.longest, now - self.last_ack)
            await asyncio.sleep(STALL_SAMPLE)


#: unacked records a producer's stream may hold: producers go at the query's pace (its commits ack them),
#: so a fault a few seconds in finds them mid-stream
MAX_BUFFER = 200


class FleetProducer:
    """Producer ``index`` of ``workload``: a Connector given ``urls`` (its first one first), run by :meth:`run`."""

    def __init__(self, urls: Sequence[str], workload: Workload, index: int, **connector: Any) -> None:
        self.urls = list(urls)
        self.workload = workload
        self.index = index
        self.options = {"max_buffer": MAX_BUFFER, **connector}
        self.stall = AckStall()
        self.conn: Connector | None = None

    async def run(self, timeout: float = TIMEOUT) -> FleetProducer:
        """Send the whole share, wait until every record is acked; the longest ACK stall is then final."""
        self.conn = Connector(
            self.urls, program=PROGRAM, instance=f"p{self.index}", on_delivery=self.stall.delivered, **self.options
        )
        async with self.conn as conn:
            watcher = asyncio.create_task(self.stall.watch(conn))
            try:
                await send_share(conn, self.workload, self.index)
                await conn.wait_all_acked(timeout)
            finally:
                watcher.cancel()
        return self

    @property
    def unacked(self) -> int:
        assert self.conn is not None
        return self.conn.unacked

    @property
    def moves(self) -> int:
        assert self.conn is not None
        return self.conn.stats.moves

    def summary(self) -> str:
        """Its stall and moves; with records unacked, where it is and why its last connections ended."""
        assert self.conn is not None
        said = (f"p{self.index}: longest ACK stall {self.stall.longest:.2f} s, moves {self.moves}, "
                f"connections {self.conn.stats.connections}, resent {self.conn.resent}")  # fmt: skip
        if self.unacked:
            said += f", {self.unacked} unacked on {self.conn.bridge} (last errors {list(self.conn.stats.errors)[-3:]})"
        return said


def rotated(urls: Sequence[str], index: int) -> list[str]:
    """``urls`` starting at ``index`` (modulo): producers spread over the bridges, each knowing all of them."""
    k = index % len(urls)
    return [*urls[k:], *urls[:k]]


def bridge_options(bridges: Sequence[FleetBridge]) -> dict[str, str]:
    """The ``aqueduct`` source's options naming ``bridges`` (address, Flight token file, CA of each)."""
    return {
        "bridge": ",".join(f"{b.name}={b.flight}" for b in bridges),
        "bridgeTokenFile": ",".join(f"{b.name}={b.token_file}" for b in bridges),
        "bridgeCA": ",".join(f"{b.name}={b.ca}" for b in bridges),
    }


class FailoverQuery:
    """The user's query over a fleet, into Parquet under ``root/out``: what tests wait for and verify.

    Reading every bridge with ``failover=true`` as consumer ``default`` (its
    commits ack the producers). Subclasses run it: :class:`SessionQuery` on
    a Spark session of this process, the cluster test's ``DriverQuery`` as a
    driver process on a standalone cluster.
    """

    def __init__(self, root: Path) -> None:
        self.output = root / "out"
        self.checkpoint = root / "checkpoint"

    def alive(self) -> None:
        """Fail, saying why, if the query died."""
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    def rows_of(self, stream_ids: Sequence[int]) -> int:
        """Committed rows of ``stream_ids`` in the sink."""
        table = read_committed(self.output)
        wanted = set(stream_ids)
        return 0 if table is None else sum(1 for sid in table.column("stream_id").to_pylist() if sid in wanted)

    async def until_rows(self, stream_ids: Sequence[int], more_than: int, timeout: float = TIMEOUT) -> None:
        """Wait until the sink holds more than ``more_than`` committed rows of ``stream_ids``."""
        deadline = time.monotonic() + timeout
        while self.rows_of(stream_ids) <= more_than:
            self.alive()
            assert time.monotonic() < deadline, f"no more than {more_than} rows of {stream_ids} within {timeout} s"
            await asyncio.sleep(0.25)

    async def until_all(self, workload: Workload, timeout: float = TIMEOUT) -> Verification:
        """Wait until the sink holds as many rows as the workload sent; the verification of them."""
        deadline = time.monotonic() + timeout
        while (result := verify_output(self.output, workload.expected())).rows < workload.total:
            self.alive()
            assert time.monotonic() < deadline, f"{result.rows} of {workload.total} rows within {timeout} s"
            await asyncio.sleep(0.25)
        return result


#: The query's trigger and ``idleWait``, as ``aqueduct-bridge serve`` runs its own: batches back to back, a
#: trigger finding nothing waiting up to 0.25 s for data (so a batch starts once the producers' next records,
#: sent when the last commit acked them, are durable, not a trigger interval later).
QUERY_TRIGGER, QUERY_IDLE_WAIT = BridgeConfig.trigger_interval, BridgeConfig.idle_wait


class SessionQuery(FailoverQuery):
    """The query on a SparkSession of this process (the tests' shared ``local[2]`` one, or the benchmark's)."""

    def __init__(self, spark: Any, root: Path, options: dict[str, str], trigger_interval: float = QUERY_TRIGGER) -> None:
        from aqueduct.bridge.app.pipeline import start_sink

        super().__init__(root)
        options = {"failover": "true", "consumer": "default", "idleWait": f"{QUERY_IDLE_WAIT}s", **options}
        df = spark.readStream.format("aqueduct").options(**options).load()
        self.query = start_sink(
            df, "parquet", query_name=f"failover_{root.name}".replace("-", "_"), checkpoint=self.checkpoint,
            output_dir=self.output, trigger_interval=trigger_interval,
        )  # fmt: skip

    def alive(self) -> None:
        assert self.query.isActive, f"the query died: {self.query.exception()}"

    async def stop(self) -> None:
        await asyncio.to_thread(self.query.stop)


def write_bridge_list(path: Path, bridges: Sequence[FleetBridge]) -> None:
    """The ``bridgeList`` file naming ``bridges``, replaced whole (a new file renamed over the old), as an operator should."""
    lines = [f"{b.name} {b.flight} token={b.token_file} ca={b.ca}" for b in bridges]
    scratch = path.with_name(path.name + ".new")
    scratch.write_text("".join(f"{line}\n" for line in lines))
    scratch.replace(path)


@dataclass
class Verdict:
    """What every failover test ends with: each record once with its payload, all acked, the ACK stalls."""

    result: Verification | None  # None: not every record was acked
    producers: list[FleetProducer]

    def check(self) -> None:
        """Every record exactly once with its payload, nothing unacked (the stalls are figures, not asserted)."""
        assert self.result is not None and self.result.ok, self.result and self.result.problems()
        assert all(p.unacked == 0 for p in self.producers), self.report()

    @property
    def longest_stall(self) -> float:
        return max(p.stall.longest for p in self.producers)

    def report(self) -> str:
        return "; ".join(p.summary() for p in self.producers)


class Fleet:
    """Bridges, producers and the query of one test (or one bench run), ended together by :meth:`close`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bridges: dict[str, FleetBridge] = {}
        self.query: FailoverQuery | None = None
        self.producers: list[FleetProducer] = []
        self.running: asyncio.Future[list[Any]] | None = None

    async def add_bridges(self, *names: str, root: Path | None = None, start: bool = True,
                          **settings: Any) -> list[FleetBridge]:  # fmt: skip
        """Bridges ``names`` under ``root`` (default: the fleet's), started together unless ``start`` is false.

        ``settings``: further :class:`FleetBridge` fields (``credits``).
        """
        added = [FleetBridge(n, (root or self.root) / n, **settings) for n in names]
        self.bridges |= {b.name: b for b in added}
        if start:
            await asyncio.gather(*(b.start() for b in added))
        return added

    def urls(self, *names: str) -> list[str]:
        return [self.bridges[n].url for n in names]

    def start_query(self, spark: Any, options: dict[str, str], trigger_interval: float = QUERY_TRIGGER) -> FailoverQuery:
        """The query on ``spark`` over the bridges ``options`` name."""
        self.query = SessionQuery(spark, self.root, options, trigger_interval)
        return self.query

    def start_producers(self, workload: Workload, urls: Callable[[int], Sequence[str]], **connector: Any) -> None:
        """Every producer of ``workload`` in the background, producer ``p`` given ``urls(p)``."""
        self.producers = [FleetProducer(urls(p), workload, p, **connector) for p in range(workload.producers)]
        self.running = asyncio.gather(*(p.run() for p in self.producers))

    def producing(self) -> None:
        """Fail unless every producer is still at work: a fault injected now hits them under load."""
        assert self.running is not None and not self.running.done(), "the producers finished before the fault"

    async def until_moved_off(self, bridge: FleetBridge, timeout: float = TIMEOUT) -> None:
        """Wait until no producer serves (or tries) ``bridge`` any more."""
        deadline = time.monotonic() + timeout
        while any(p.conn is not None and p.conn.bridge == bridge.url for p in self.producers):
            self.producing()
            assert time.monotonic() < deadline, f"producers still on {bridge.name}: {Verdict(None, self.producers).report()}"
            await asyncio.sleep(0.1)

    async def until_each_acked(self, workload: Workload, rows: int, timeout: float = TIMEOUT) -> None:
        """Wait until more than ``rows`` rows of each producer are in the sink: all are past the query's start."""
        assert self.query is not None
        for p in range(workload.producers):
            await self.query.until_rows(workload.stream_ids(p), rows, timeout)

    async def fault(self, workload: Workload, inject: Callable[[], Awaitable[object]],
                    timeout: float = TIMEOUT) -> Verdict:  # fmt: skip
        """``inject()`` under load, then the verdict; stalls counted from the fault.

        The fault comes once more than 100 rows of every producer are in the
        sink (all past the query's start, so a stall is the fault's) and
        while they still produce.
        """
        await self.until_each_acked(workload, 100, timeout)
        self.producing()
        for p in self.producers:
            p.stall.mark()
        await inject()
        verdict = await self.verdict(workload, timeout)
        print(verdict.report())
        return verdict

    async def verdict(self, workload: Workload, timeout: float = TIMEOUT) -> Verdict:
        """Wait for every producer's last ACK and every row in the sink; the verdict on them."""
        assert self.running is not None and self.query is not None
        deadline = time.monotonic() + timeout
        while not self.running.done():
            self.query.alive()
            if time.monotonic() > deadline:
                rows = verify_output(self.query.output, workload.expected()).rows
                raise AssertionError(f"not every record acked within {timeout} s ({rows} of {workload.total} rows "
                                     f"in the sink): {Verdict(None, self.producers).report()}")  # fmt: skip
            await asyncio.sleep(0.25)
        await self.running
        return Verdict(await self.query.until_all(workload, timeout), self.producers)

    async def close(self) -> None:
        if self.running is not None:
            self.running.cancel()
            await asyncio.gather(self.running, return_exceptions=True)
        if self.query is not None:
            await self.query.stop()
        await asyncio.gather(*(b.stop() for b in self.bridges.values()))


async def lose_a_bridge(fleet: Fleet, spark: Any, workload: Workload, timeout: float = TIMEOUT,
                        **connector: Any) -> Verdict:  # fmt: skip
    """Issue 36's first test: two bridges, SIGKILL one and delete its log under load; the verdict.

    Producers are given both bridges' URLs, half of them starting on each;
    bridge ``b1`` is SIGKILLed and its log directory deleted under load
    (:meth:`Fleet.fault`).
    ``connector``: further Connector options (``replicas=2``).
    """
    b1, b2 = await fleet.add_bridges("b1", "b2")
    fleet.start_query(spark, bridge_options([b1, b2]))
    fleet.start_producers(workload, lambda p: rotated(fleet.urls("b1", "b2"), p), **connector)
    return await fleet.fault(workload, lambda: b1.kill(lose_log=True), timeout)
