"""The whole bridge with Spark: end-to-end rate and latency, and memory under a slow Spark.

The server side is a real :class:`~aqueduct.bridge.app.service.Bridge` (durable
log, group commit, Spark Structured Streaming query ``aqueduct`` source ->
Parquet file sink, commit listener, ACKs). Spark runs ``local[1]``; its JVM
and Python workers inherit the server process's CPU pinning, so bridge plus
Spark get one core, the producer the other. One SparkSession is kept per
server process (starting one takes tens of seconds); each run gets a fresh
log, query, checkpoint and output directory.

* ``e2e``: a ``Connector`` sends 100-byte records as fast as credits and its
  unacked buffer allow. A record is *visible* once the micro-batch holding it
  is committed in the sink; the bridge ACKs its point of reference only then,
  so the client takes latency = ACK arrival - send (the ACK's trip back,
  ~a millisecond on loopback, included) and the rate = records acked per
  second after the warm-up. The server counts the sink's committed rows at
  the end: they must equal what was acked, without duplicates.
* ``memory``: Spark is throttled (``maxRecordsPerTrigger``) far below the
  producer, whose own unacked buffer is made unlimited, so only the bridge's
  credits and backlog bound hold it back. The server samples its RSS (and
  the JVM's) every 100 ms; memory is *bounded* if the last third of the run
  peaks no higher than the middle third (plus 10 % and 16 MB of noise).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from bench.common import Certs, Meter, payload, run_until_idle, sending_bound
from bench.stats import percentile

STREAM_ID = 1
CONNECT_ATTEMPTS = 3
_spark_session: Any = None


def spark_session() -> Any:
    """The process's SparkSession (created on first use, blocking: call it in a thread).

    ``local[1]``: Spark inherits the process's pinning to one core.
    """
    global _spark_session
    if _spark_session is None:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        _spark_session = (
            SparkSession.builder.master("local[1]")
            .appName("aqueduct-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "1")
            .getOrCreate()
        )
    return _spark_session


class RssSampler:
    """Samples this process's RSS and its children's (Spark's JVM and workers) in a thread."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.samples: list[tuple[float, int, int]] = []  # (time, own rss, children rss)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._me = psutil.Process()

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            children = 0
            for child in self._me.children(recursive=True):
                try:
                    children += child.memory_info().rss
                except psutil.Error:
                    pass
            self.samples.append((time.monotonic(), self._me.memory_info().rss, children))

    def summary(self) -> dict[str, Any]:
        """Peaks in MB, and whether the last third of the run stayed at the middle third's level."""
        if len(self.samples) < 9:
            return {"bridge_peak_mb": None, "jvm_peak_mb": None, "bounded": None}
        third = len(self.samples) // 3
        middle = max(s[1] for s in self.samples[third : 2 * third])
        last = max(s[1] for s in self.samples[2 * third :])
        mb = 1024 * 1024
        return {
            "bridge_peak_mb": max(s[1] for s in self.samples) / mb,
            "bridge_middle_peak_mb": middle / mb,
            "bridge_last_peak_mb": last / mb,
            "jvm_peak_mb": max(s[2] for s in self.samples) / mb,
            "bounded": last <= middle * 1.10 + 16 * mb,
        }


async def _serve(
    params: dict[str, Any], certs: Certs, ready: Callable[[int], None]
) -> dict[str, Any]:
    from aqueduct.bridge.app.service import Bridge, BridgeConfig
    from demo.sinkfiles import read_committed

    spark = await asyncio.to_thread(spark_session)
    tcp = params["transport"] == "tcp"
    with tempfile.TemporaryDirectory(prefix="aqueduct-bench-bridge-") as tmp:
        work = Path(tmp)
        bridge = Bridge(
            BridgeConfig(
                log_dir=work / "log",
                quic=None if tcp else ("127.0.0.1", 0),
                tcp=("127.0.0.1", 0) if tcp else None,
                certfile=certs.server_cert,
                keyfile=certs.server_key,
                master="local[1]",
                output_dir=work / "out",
                trigger_interval=params["trigger"],
                max_records_per_trigger=params.get("max_per_trigger"),
                max_lag=params.get("max_lag", BridgeConfig.max_lag),
                query_name=f"bench{os.getpid()}_{int(time.monotonic() * 1000)}",
            ),
            spark=spark,
        )
        await bridge.start()
        address = bridge.tcp_address if tcp else bridge.quic_address
        assert address is not None
        meter = Meter(0.0)  # only for the idle watchdog: progress of durable records
        with RssSampler() as rss:
            ready(address[1])
            bound = 2 * params["prime_timeout"] + sending_bound(params)
            peaks = {"max_backlog": 0, "max_withheld_credits": 0}
            ended = await run_until_idle(
                _until_session_ends(bridge, meter, peaks), meter, 60.0, bound + 60.0
            )
            progress = bridge.progress()
        await bridge.stop()
        table = read_committed(work / "out")
        rows = 0 if table is None else table.num_rows
        distinct = 0 if table is None else len(set(table.column("message_id").to_pylist()))
    return {
        "ended": ended,
        "sink_rows": rows,
        "sink_distinct": distinct,
        "batches": progress.batches,
        "durable_records": progress.durable_records,
        **peaks,
        **rss.summary(),
    }


async def _until_session_ends(bridge: Any, meter: Meter, peaks: dict[str, int]) -> None:
    """Wait until a producer connected and then left; feed durable progress to the watchdog.

    ``peaks`` records the largest backlog (records Spark has not committed)
    and the most credits held back, to show the backlog bound at work.
    """
    seen_session, last = False, 0
    while True:
        await asyncio.sleep(0.1)
        p = bridge.progress()
        peaks["max_backlog"] = max(peaks["max_backlog"], p.lag)
        peaks["max_withheld_credits"] = max(peaks["max_withheld_credits"], p.withheld_credits)
        if p.durable_records != last:
            meter.add(p.durable_records - last, 0)
            last = p.durable_records
        seen_session = seen_session or p.sessions > 0
        if bridge.failed:
            raise RuntimeError(bridge.failed)
        if seen_session and p.sessions == 0:
            return


class _AckClock:
    """Per phase: latency of each record from its send to the ACK covering it, and the acked rate."""

    def __init__(self, stream: Any, warmup: float, size: int) -> None:
        self.stream = stream
        self.first = stream.next_id
        self.seen = self.first
        self.sent_at: list[float] = []
        self.meter = Meter(warmup)
        self.measured_from = time.perf_counter() + warmup
        self.latencies: list[float] = []
        self.size = size

    def collect(self) -> None:
        """Account for every record acked since the last look."""
        acked, now = self.stream.acked, time.perf_counter()
        if acked <= self.seen:
            return
        for i in range(self.seen - self.first, acked - self.first):
            if self.sent_at[i] >= self.measured_from:
                self.latencies.append(now - self.sent_at[i])
        self.meter.add(acked - self.seen, (acked - self.seen) * self.size)
        self.seen = acked

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(0.005)
            self.collect()

    def result(self) -> dict[str, Any]:
        return {
            **self.meter.result(),
            "sent": self.stream.next_id - self.first,
            "acked": self.seen - self.first,
            "p50_ms": percentile(self.latencies, 50) * 1000,
            "p99_ms": percentile(self.latencies, 99) * 1000,
        }


async def _phase(
    stream: Any, body: bytes, params: dict[str, Any], rate: float | None = None
) -> dict[str, Any]:
    """Send for ``seconds`` (as fast as credits allow, or ``rate`` per second), wait for the acks."""
    clock = _AckClock(stream, params["warmup"], len(body))
    watcher = asyncio.ensure_future(clock.watch())
    began = time.perf_counter()
    deadline = began + params["seconds"]
    send, sent_at = stream.send, clock.sent_at
    try:
        async with asyncio.timeout(params["seconds"] + params["limit"]):  # a stalled bridge
            while time.perf_counter() < deadline:
                if rate is not None:  # paced: 10 ms ticks, never ahead of the schedule
                    due = int((time.perf_counter() - began) * rate) - (stream.next_id - clock.first)
                    if due <= 0:
                        await asyncio.sleep(0.01)
                        continue
                for _ in range(64 if rate is None else due):
                    sent_at.append(time.perf_counter())
                    await send(body, event_time=int(time.time() * 1_000_000))
            await stream.wait_acked(stream.next_id)
    except TimeoutError:
        pass
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    clock.collect()
    return clock.result()


async def _send(params: dict[str, Any], certs: Certs, port: int) -> dict[str, Any]:
    from aqueduct.connector.producer.client import Connector
    from aqueduct.proto.errors import AqueductError, ConnectionLost

    scheme = "tcp" if params["transport"] == "tcp" else "aqueduct"
    body = payload(params["size"])
    for attempt in range(CONNECT_ATTEMPTS):
        # While Spark plans its first batch the bridge's core is saturated and a
        # QUIC handshake can exceed its 30 s bound; the connector gives up then
        # (ConnectionLost escapes its retry loop), so retry with a fresh one.
        connector = Connector(
            f"{scheme}://127.0.0.1:{port}",
            program="bench",
            instance="e2e",
            cafile=str(certs.ca),
            connect_timeout=60,
            max_buffer=params["max_buffer"],
        )
        try:
            await connector.connect()
            break
        except (ConnectionLost, TimeoutError):
            if attempt == CONNECT_ATTEMPTS - 1:
                raise
    try:
        stream = await connector.stream(STREAM_ID, "bench/e2e")
        # Warm-up: Spark plans and runs its first micro-batch slowly (tens of
        # seconds on one busy core); measure only once a first batch is acked.
        primed_at = time.perf_counter()
        for _ in range(params["prime"]):
            await stream.send(body, event_time=int(time.time() * 1_000_000))
        await stream.wait_acked(stream.next_id, timeout=params["prime_timeout"])
        prime_seconds = time.perf_counter() - primed_at
        warm = None
        if params.get("warm_seconds"):
            # Spark's JVM is still compiling its hot paths for the first
            # micro-batches with data (the first batches of 80,000 records take
            # seconds longer than later ones); an unmeasured saturated phase
            # gets it to steady state before anything counts.
            warm = await _phase(stream, body, {**params, "seconds": params["warm_seconds"]})
        phases = [await _phase(stream, body, params) for _ in range(params.get("phases", 1))]
        paced = None
        if params.get("paced_rate"):
            # Latency at saturation is mostly queueing (Little's law); this phase
            # shows it at a rate the pipeline sustains comfortably, once the
            # backlog of the saturated phases is gone.
            with contextlib.suppress(TimeoutError):
                await stream.wait_acked(stream.next_id, timeout=params["prime_timeout"])
            paced = await _phase(stream, body, params, rate=params["paced_rate"])
    except (ConnectionError, AqueductError) as exc:
        raise RuntimeError(f"{exc!r}; connector connections ended: {connector.stats.errors}") from exc
    finally:
        with contextlib.suppress(AqueductError, ConnectionError):
            await connector.close(flush_timeout=5)
    extra = {} if paced is None else {
        "paced_rate": params["paced_rate"],
        "paced_p50_ms": paced["p50_ms"],
        "paced_p99_ms": paced["p99_ms"],
    }
    if warm is not None:
        extra["warm_msg_per_s"] = warm["msg_per_s"]
    return {"phases": phases, "first_batch_s": prime_seconds, **extra}


serve_e2e = serve_memory = _serve
send_e2e = send_memory = _send
