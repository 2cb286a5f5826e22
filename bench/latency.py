"""``python -m bench.latency``: send -> ACK latency with the bridge's defaults, beside Spark's own floor.

One run, two processes, a server (the bridge, with Spark's JVM and its
Python workers as children) and a producer, in one of two layouts:

* **the defaults** (default): what ``aqueduct-bridge serve`` does with its
  defaults, nothing pinned: Spark's default master (``local[*]``, every
  core) and the scheduler free to run any process on any core. The
  producer is not pinned either: at 1,000 records/s it needs a few
  hundredths of a core, and pinned to one core it would only queue there
  behind whatever Spark runs on it, a wait a user's producer (on another
  machine, or unpinned) does not have.
* ``--pin-server``: every other benchmark's layout (``spark_e2e``'s): the
  whole server side on CPU 0 with Spark ``local[1]``, the producer on CPU 1.

The ``rate`` floor runs in the same layout, in the same run.

0. The server warms Spark's JVM up, unmeasured (``--jvm-warmup``): the
   floor's query (step 3) at the highest rate. A fresh JVM compiles Spark's
   micro-batch and Parquet paths for its first minute or so (its C2 JIT
   took 0.2 of the one core in the first seconds); without this, whatever
   is measured first pays for it, and ours was measured first.
1. The server starts a real :class:`~aqueduct.bridge.app.service.Bridge` with
   its default settings (Parquet sink, default trigger, group commit) on
   a fresh SparkSession. The producer connects, sends one record and
   waits for its ACK: the **first micro-batch's ack time**, counted from
   the moment the server asked Spark to start the query.
2. The producer sends 100-byte records at a steady rate (1,000 and 10,000
   records/s), first unmeasured (``--warmup``), then measured
   (``--seconds``). Latency is ACK arrival - ``send()``, per record; an
   ACK leaves only after the micro-batch holding the record committed in
   the sink.
3. The server then runs **Spark's own floor**: the built-in ``rate``
   source at the same rates into the same Parquet sink with the same
   trigger, and takes each micro-batch's time (``triggerExecution``, the
   batches that carried rows).

What bias is left is reported: the JVM's JIT compilation time (its
``CompilationMXBean``, sampled by the server) per second of each measured
phase, ours and the floor's.

The server also takes the **latency budget** of every record it carried:
the wait for the group commit (send -> durable, from the record's
``event_time`` and the commit's end), the wait for a trigger (durable ->
trigger start), and from Spark's progress, the sink's files and the
checkpoint: planning (``latestOffset``, offset log, ``getBatch``, query
planning), the task (launch, ``read()``, Parquet write: until the last
data file's mtime), the sink's commit (``_spark_metadata/N``), the commit
log (where the ACK waited for it: the bridge acks on the file sink's own
commit), the ACK leaving the bridge, and its trip to the producer (the
producer's latency minus the server's send -> ACK-sent, medians).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import Certs, payload
from bench.stats import percentile

STREAM_ID = 1
RATES = (1000, 10000)
#: Budget rows, in the order a record meets them: (key, what it is)
BUDGET = (
    ("group_commit", "group commit (send -> durable: gather, write, fsync)"),
    ("trigger_wait", "waiting for a trigger (durable -> trigger start)"),
    ("planning", "planning (latestOffset, offset log, getBatch, query planning)"),
    ("task", "task launch, read(), Parquet write"),
    ("sink_commit", "sink commit (_spark_metadata)"),
    ("commit_log", "commit log (checkpoint commits/N), if the ACK waited for it"),
    ("ack_out", "commit signal (sink log, else commit log) -> ACK sent"),
    ("ack_trip", "ACK's trip to the producer"),
)


# ------------------------------------------------------------------ server side


def _ts(text: str) -> float:
    """Spark's progress timestamp (``2026-11-26T01:02:03.456Z``) as epoch seconds."""
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _sink_times(out: Path, batch: int) -> tuple[float | None, float | None]:
    """(last data file written, sink commit) of file-sink batch ``batch``, epoch seconds."""
    meta = out / "_spark_metadata"
    for name in (str(batch), f"{batch}.compact"):
        path = meta / name
        if path.exists():
            committed = path.stat().st_mtime
            if name.endswith(".compact"):
                return None, committed  # holds every earlier batch's files too
            files = [json.loads(line) for line in path.read_text().splitlines()[1:] if line.strip()]
            written = max((f["modificationTime"] / 1000 for f in files), default=None)
            return written, committed
    return None, None


def _record_budget(
    log_dir: Path, out: Path, checkpoint: Path, progress: list[dict[str, Any]],
    commits_done: dict[int, float], acks_sent: dict[str, float],
) -> list[dict[str, float]]:
    """Per record of the log: its send time and each budget interval (seconds), from the files."""
    import pyarrow.compute as pc

    from aqueduct.bridge.storage.view import load_streams

    batches = []
    for p in progress:
        source = p["sources"][0]
        if not p.get("numInputRows") or not source.get("endOffset"):
            continue
        d, start = p["durationMs"], _ts(p["timestamp"])
        end, begin = (_offset_dict(source.get(k)) for k in ("endOffset", "startOffset"))
        written, sink_committed = _sink_times(out, p["batchId"])
        commit_log = checkpoint / "commits" / str(p["batchId"])
        planned = start + sum(d.get(k, 0) for k in ("latestOffset", "walCommit", "getBatch", "queryPlanning")) / 1000
        finished = start + d["triggerExecution"] / 1000
        batches.append({
            "start": start, "planned": planned, "written": written, "sink_committed": sink_committed,
            "commit_log": commit_log.stat().st_mtime if commit_log.exists() else None,
            "finished": finished, "ack_sent": acks_sent.get(json.dumps(end, sort_keys=True)),
            "lo": int(begin.get(str(STREAM_ID), 0)), "hi": int(end.get(str(STREAM_ID), 0)),
        })  # fmt: skip
    streams = load_streams(log_dir)
    if STREAM_ID not in streams:
        return []
    s = streams[STREAM_ID]
    records: list[dict[str, float]] = []
    for b in batches:
        if b["hi"] <= b["lo"] or b["ack_sent"] is None:
            continue
        for e in s.entries_between(max(b["lo"], s.earliest), b["hi"]):
            durable = commits_done.get(e.written_at_us)
            for batch in s.read(max(b["lo"], e.first_offset), min(b["hi"], e.end_offset)):
                rows = batch.filter(pc.invert(batch.column("boundary")))
                for t in rows.column("event_time").cast("int64").to_pylist():
                    sent = t / 1e6
                    records.append(_intervals(sent, durable, b))
    return records


def _offset_dict(offset: Any) -> dict[str, int]:
    """A source offset from progress (JSON text, a dict, or null) as a dict."""
    if isinstance(offset, str):
        offset = json.loads(offset)
    return offset if isinstance(offset, dict) else {}


def _intervals(sent: float, durable: float | None, b: dict[str, Any]) -> dict[str, float]:
    """One record's budget: consecutive intervals that add up to send -> ACK sent."""
    durable = durable if durable is not None else sent
    ready = max(durable, b["start"])  # became readable during planning: no trigger wait
    written = b["written"] or b["sink_committed"] or b["finished"]
    sink = b["sink_committed"] or written
    log = b["commit_log"] or sink
    signal = log if b["ack_sent"] >= log else sink  # the bridge acks on the file sink's own commit
    return {
        "sent": sent,
        "group_commit": durable - sent,
        "trigger_wait": ready - durable,
        "planning": max(0.0, b["planned"] - ready),
        "task": written - b["planned"],
        "sink_commit": sink - written,
        "commit_log": signal - sink,
        "ack_out": b["ack_sent"] - signal,
        "server_total": b["ack_sent"] - sent,
    }


async def _run_bridge(
    spark: Any, master: str, params: dict[str, Any], certs: Certs, work: Path, ready: Any
) -> dict[str, Any]:
    from aqueduct.bridge.app.service import Bridge, BridgeConfig

    # Progress from the query itself, not a listener: a Python listener converts
    # every event field by field over py4j, costing the core the bridge runs on.
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
    config = BridgeConfig(
        log_dir=work / "log", quic=("127.0.0.1", 0), certfile=certs.server_cert, keyfile=certs.server_key,
        master=master, output_dir=work / "out", query_name=f"latency_{int(time.time() * 1000)}",
    )  # fmt: skip
    bridge = Bridge(config, spark=spark)
    acks_sent: dict[str, float] = {}
    commits_done: dict[int, float] = {}

    def timed(on_commit: Any) -> Any:
        """``on_commit`` (a commit signal, which sends the ACKs), noting when each batch's ACK left."""

        def acked(consumer: str, positions: dict[int, int]) -> None:
            on_commit(consumer, positions)
            key = json.dumps({str(k): v for k, v in positions.items()}, sort_keys=True)
            acks_sent.setdefault(key, time.time())

        return acked

    bridge.signals.on_spark_commit = timed(bridge.signals.on_spark_commit)  # type: ignore[method-assign]
    bridge.signals.on_sink_commit = timed(bridge.signals.on_sink_commit)  # type: ignore[method-assign]
    query_start = time.time()
    await bridge.start()
    assert bridge.log is not None and bridge.quic_address is not None
    start_commit = bridge.log.start_commit

    def timed_start_commit(now: float | None = None) -> Any:
        now = time.time() if now is None else now
        future = start_commit(now)
        future.add_done_callback(lambda _: commits_done.setdefault(int(now * 1_000_000), time.time()))
        return future

    bridge.log.start_commit = timed_start_commit  # type: ignore[method-assign]
    ready({"port": bridge.quic_address[1], "query_start": bridge.query_started_at, "bridge_start": query_start})
    try:
        async with asyncio.timeout(params["bound"]):
            seen = False
            while True:
                await asyncio.sleep(0.1)
                if bridge.failed:
                    raise RuntimeError(bridge.failed)
                sessions = bridge.progress().sessions
                if seen and sessions == 0:
                    break
                seen = seen or sessions > 0
    finally:
        events = [] if bridge.query is None else list(bridge.query.recentProgress)
        await bridge.stop()
    records = _record_budget(config.log_dir, config.output_dir, config.checkpoint, events, commits_done, acks_sent)
    return {
        "records": [[round(r[k], 6) for k in _RECORD_KEYS] for r in records],
        "spark_ms": _spark_phases(events),
        "first_batch_ms": next((p["durationMs"] for p in events if p.get("numInputRows")), {}),
        "first_triggers": _first_triggers(events, bridge.query_started_at or query_start),
    }


def _first_triggers(progress: list[dict[str, Any]], query_start: float, count: int = 4) -> list[list[float]]:
    """The query's first triggers up to its first with rows: [start after the query's start s, rows, ms]."""
    out = []
    for p in progress[:count]:
        out.append([round(_ts(p["timestamp"]) - query_start, 3), p.get("numInputRows", 0),
                    p["durationMs"].get("triggerExecution", 0)])  # fmt: skip
        if p.get("numInputRows"):
            break
    return out


def _spark_phases(progress: list[dict[str, Any]]) -> dict[str, float]:
    """Median of each of Spark's ``durationMs`` phases over the batches that carried rows."""
    with_rows = [p["durationMs"] for p in progress if p.get("numInputRows")]
    keys = sorted({k for d in with_rows for k in d})
    return {k: statistics.median(d.get(k, 0) for d in with_rows) for k in keys}


_RECORD_KEYS = ("sent", *(k for k, _ in BUDGET if k != "ack_trip"), "server_total")


def _stop_between_triggers(query: Any, wait: float = 5.0) -> None:
    deadline = time.monotonic() + wait
    while query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.02)
    query.stop()


class JitClock:
    """The JVM's total JIT compilation time, sampled in a thread, to tell what each phase paid for it."""

    def __init__(self, spark: Any, interval: float = 0.25) -> None:
        self._bean = spark._jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
        self.samples: list[tuple[float, float]] = []  # (wall time, compilation ms so far)
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._run, name="jit-clock", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        self.samples.append((time.time(), float(self._bean.getTotalCompilationTime())))

    def _run(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(self._interval):
                return

    def stop(self) -> list[tuple[float, float]]:
        """The samples, the last one taken now (after the last phase's end)."""
        self._stop.set()
        self._thread.join(5)
        self._sample()
        return self.samples


def jit_ms_per_s(samples: list[tuple[float, float]], window: list[float]) -> float | None:
    """JIT compilation ms per wall second over ``window``, from the samples around it."""
    before = [s for s in samples if s[0] <= window[0]]
    after = [s for s in samples if s[0] >= window[1]]
    if not before or not after or after[0][0] <= before[-1][0]:
        return None
    (t0, ms0), (t1, ms1) = before[-1], after[0]
    return (ms1 - ms0) / (t1 - t0)


def _rate_floor(spark: Any, rate: int, trigger: str | None, warmup: float, seconds: float) -> dict[str, Any]:
    """Spark's built-in ``rate`` source into a Parquet sink: micro-batch times of batches with rows."""
    with tempfile.TemporaryDirectory(prefix="aqueduct-latency-rate-", ignore_cleanup_errors=True) as tmp:
        frame = spark.readStream.format("rate").option("rowsPerSecond", rate).load()
        writer = (
            frame.writeStream.format("parquet").option("path", f"{tmp}/out")
            .option("checkpointLocation", f"{tmp}/checkpoint")
        )  # fmt: skip
        if trigger is not None:
            writer = writer.trigger(processingTime=trigger)
        query = writer.start()
        try:
            time.sleep(warmup)
            first = len(query.recentProgress)
            window = [time.time()]
            time.sleep(seconds)
            window.append(time.time())
            progress = query.recentProgress[first:]
        finally:
            _stop_between_triggers(query)
    times = [p["durationMs"]["triggerExecution"] / 1000 for p in progress if p["numInputRows"]]
    return {
        "rate": rate, "batches": len(times), **_percentiles(times), "spark_ms": _spark_phases(progress),
        "window": window,
    }  # fmt: skip


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_ms": None, "p90_ms": None, "p99_ms": None}
    return {f"p{q}_ms": percentile(values, q) * 1000 for q in (50, 90, 99)}


def layout_session(pin_server: bool) -> tuple[Any, str]:
    """(SparkSession, its master) for the layout: the bridge's default master, or ``local[1]`` pinned.

    Pinned, the session is every other benchmark's (``local[1]``, inheriting
    this process's pinning to CPU 0); else the session ``aqueduct-bridge
    serve`` makes with its defaults.
    """
    from aqueduct.bridge.app.pipeline import local_session
    from aqueduct.bridge.app.service import BridgeConfig
    from bench.bridge_bench import spark_session

    if pin_server:
        return spark_session(), "local[1]"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return local_session(BridgeConfig.master, "ERROR", app_name="aqueduct-bench"), BridgeConfig.master


def _cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


async def serve_bridge(params: dict[str, Any], certs: Certs, ready: Any) -> dict[str, Any]:
    from aqueduct.bridge.app.pipeline import trigger_option
    from aqueduct.bridge.app.service import BridgeConfig

    spark, master = await asyncio.to_thread(layout_session, params["pin_server"])
    spark.sparkContext.setLogLevel("ERROR")
    jit = JitClock(spark)
    trigger = trigger_option(BridgeConfig.trigger_interval)
    try:
        if params["jvm_warmup"] > 0:  # unmeasured: neither side pays for the fresh JVM's compiling
            await asyncio.to_thread(_rate_floor, spark, max(params["rates"]), trigger, params["jvm_warmup"], 0.0)
        with tempfile.TemporaryDirectory(prefix="aqueduct-latency-") as tmp:
            ours = await _run_bridge(spark, master, params, certs, Path(tmp), ready)
        floors = []
        for rate in params["rates"]:
            floors.append(await asyncio.to_thread(
                _rate_floor, spark, rate, trigger, params["floor_warmup"], params["floor_seconds"]
            ))  # fmt: skip
    finally:
        samples = jit.stop()
    layout = {"master": master, "server_cpus": _cpus()}
    return {**ours, "trigger": trigger, "floors": floors, "jit": samples, "layout": layout}


# ------------------------------------------------------------------ client side


async def _paced(stream: Any, body: bytes, rate: int, seconds: float) -> list[tuple[int, float, float]]:
    """Send ``rate`` records per second for ``seconds``; (id, send wall time, send perf time) each."""
    sent: list[tuple[int, float, float]] = []
    began = time.perf_counter()
    first = stream.next_id
    while (now := time.perf_counter()) - began < seconds:
        due = int((now - began) * rate) - (stream.next_id - first)
        if due <= 0:
            await asyncio.sleep(0.001)
            continue
        for _ in range(due):
            sent.append((stream.next_id, time.time(), time.perf_counter()))
            await stream.send(body, event_time=int(time.time() * 1_000_000))
    return sent


class _Acks:
    """When each ACK arrived: (point, perf time), woken by the connector, not polled."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.points: list[tuple[int, float]] = []
        self._task = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        while True:
            await self.stream.wait_acked(self.stream.acked + 1)
            self.points.append((self.stream.acked, time.perf_counter()))

    def latencies(self, sent: list[tuple[int, float, float]]) -> list[float]:
        out, k = [], 0
        for mid, _, at in sent:
            while k < len(self.points) and self.points[k][0] <= mid:
                k += 1
            if k < len(self.points):
                out.append(self.points[k][1] - at)
        return out

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def send_bridge(params: dict[str, Any], certs: Certs, port: Any) -> dict[str, Any]:
    from aqueduct.connector.producer.client import Connector

    body = payload(100)
    connector = Connector(
        f"aqueduct://127.0.0.1:{port['port']}", program="bench", instance="latency",
        cafile=str(certs.ca), connect_timeout=60, max_buffer=200_000,
    )  # fmt: skip
    await connector.connect()
    try:
        stream = await connector.stream(STREAM_ID, "bench/latency")
        acks = _Acks(stream)
        first_sent = time.time()
        await stream.send(body, event_time=int(time.time() * 1_000_000))
        await stream.wait_acked(stream.next_id, timeout=params["bound"])
        acked_at = time.time()
        first_ack, from_bridge_start = acked_at - port["query_start"], acked_at - port["bridge_start"]
        phases = []
        for rate in params["rates"]:
            await _paced(stream, body, rate, params["warmup"])
            sent = await _paced(stream, body, rate, params["seconds"])
            await stream.wait_acked(stream.next_id, timeout=params["bound"])
            lat = acks.latencies(sent)
            phases.append({
                "rate": rate, "sent": len(sent), "acked": len(lat), "window": [sent[0][1], sent[-1][1]],
                **_percentiles(lat),
            })  # fmt: skip
        await acks.close()
    finally:
        with contextlib.suppress(Exception):
            await connector.close(flush_timeout=5)
    return {
        "first_ack_s": first_ack, "first_ack_from_bridge_start_s": from_bridge_start, "phases": phases,
        "first_sent_s": first_sent - port["query_start"],
        "cpus": _cpus(),
    }  # fmt: skip


# ------------------------------------------------------------------ the report


def budget(records: list[list[float]], window: list[float], client_p50_ms: float) -> dict[str, float]:
    """Median of each budget interval (ms) over the records sent inside ``window``."""
    rows = [dict(zip(_RECORD_KEYS, r, strict=True)) for r in records if window[0] <= r[0] <= window[1]]
    if not rows:
        return {}
    out = {k: statistics.median(r[k] for r in rows) * 1000 for k in _RECORD_KEYS[1:]}
    out["ack_trip"] = max(0.0, client_p50_ms - out["server_total"])
    out["records"] = len(rows)
    return out


def summarize(server: dict[str, Any], client: dict[str, Any]) -> dict[str, Any]:
    """Ours beside the floor per rate, ratios (ours / floor p50), first ack, budget."""
    floors = {f["rate"]: f for f in server["floors"]}
    rows = []
    for phase in client["phases"]:
        floor = floors.get(phase["rate"], {})
        base = floor.get("p50_ms")
        rows.append({
            "rate": phase["rate"],
            "ours": {k: phase[k] for k in ("p50_ms", "p90_ms", "p99_ms", "sent", "acked")},
            "floor": floor,
            "jit_ms_per_s": {
                "ours": jit_ms_per_s(server["jit"], phase["window"]),
                "floor": jit_ms_per_s(server["jit"], floor["window"]) if "window" in floor else None,
            },
            "p50_ratio": phase["p50_ms"] / base if base and phase["p50_ms"] else None,
            "p99_ratio": phase["p99_ms"] / base if base and phase["p99_ms"] else None,
            "budget": budget(server["records"], phase["window"], phase["p50_ms"] or 0.0),
        })  # fmt: skip
    return {
        "layout": {**server["layout"], "producer_cpus": client["cpus"]},
        "trigger": server["trigger"], "first_ack_s": client["first_ack_s"],
        "first_ack_from_bridge_start_s": client["first_ack_from_bridge_start_s"],
        "first_sent_s": client["first_sent_s"], "first_triggers": server["first_triggers"],
        "spark_ms": server["spark_ms"], "first_batch_ms": server["first_batch_ms"], "rates": rows,
    }  # fmt: skip


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def render(summary: dict[str, Any]) -> str:
    layout = summary["layout"]
    lines = [
        f"layout: Spark master {layout['master']}, server on CPUs {layout['server_cpus']}, "
        f"producer on CPUs {layout['producer_cpus']}",
        f"send -> ACK with the bridge's defaults (trigger: {summary['trigger'] or 'as soon as possible'}), "
        "Spark's rate source -> the same Parquet sink, same trigger",
        "",
        "| rate rec/s | ours p50 / p90 / p99 ms | Spark rate-source micro-batch p50 / p90 / p99 ms "
        "| p50 ratio | p99 / floor p50 |",
        "|---|---|---|---|---|",
    ]
    for r in summary["rates"]:
        o, f = r["ours"], r["floor"]
        ratio = "-" if r["p50_ratio"] is None else f"{r['p50_ratio']:.2f}"
        ratio99 = "-" if r["p99_ratio"] is None else f"{r['p99_ratio']:.2f}"
        lines.append(
            f"| {r['rate']:,} | {_ms(o['p50_ms'])} / {_ms(o['p90_ms'])} / {_ms(o['p99_ms'])} "
            f"| {_ms(f.get('p50_ms'))} / {_ms(f.get('p90_ms'))} / {_ms(f.get('p99_ms'))} | {ratio} | {ratio99} |"
        )
    lines += [
        "",
        f"first micro-batch acked {summary['first_ack_s']:.2f} s after the query's start "
        f"({summary['first_ack_from_bridge_start_s']:.2f} s after Bridge.start(), Spark session already up); "
        f"its record was sent {summary['first_sent_s']:.2f} s after the query's start; the query's first "
        "triggers (start after the query's start, rows, triggerExecution): "
        + ", ".join(f"{t:.2f} s / {rows} / {ms:,.0f} ms" for t, rows, ms in summary["first_triggers"]),
        "",
        "Spark's durationMs, median over batches with rows (ours over the whole run; the floor per rate):",
        "  ours: " + ", ".join(f"{k} {v:,.0f}" for k, v in summary["spark_ms"].items()),
        "  ours, first batch: " + ", ".join(f"{k} {v:,.0f}" for k, v in summary["first_batch_ms"].items()),
    ]
    for r in summary["rates"]:
        phases = r["floor"].get("spark_ms", {})
        lines.append(f"  rate {r['rate']:,}: " + ", ".join(f"{k} {v:,.0f}" for k, v in phases.items()))
    lines.append("")
    lines.append("JVM JIT compilation during the measured phases, ms per s (ours / the floor's): " + "; ".join(
        f"{r['rate']:,} rec/s {_ms(r['jit_ms_per_s']['ours'])} / {_ms(r['jit_ms_per_s']['floor'])}"
        for r in summary["rates"]))  # fmt: skip
    lines.append("")
    lines += ["| budget, median ms | " + " | ".join(f"{r['rate']:,} rec/s" for r in summary["rates"]) + " |"]
    lines += ["|---|" + "---|" * len(summary["rates"])]
    for key, what in BUDGET:
        lines.append(f"| {what} | " + " | ".join(_ms(r["budget"].get(key)) for r in summary["rates"]) + " |")
    lines.append("| send -> ACK sent, server side | " + " | ".join(
        _ms(r["budget"].get("server_total")) for r in summary["rates"]) + " |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short phases (smoke test; figures are rough)")
    parser.add_argument("--rates", default=",".join(map(str, RATES)), help="records/s (default: %(default)s)")
    parser.add_argument("--seconds", type=float, help="measured seconds per rate (default 10, quick 1)")
    parser.add_argument("--warmup", type=float, help="unmeasured seconds per rate first (default 5, quick 0.5)")
    parser.add_argument("--jvm-warmup", type=float,
                        help="unmeasured seconds of the floor's query first, on the fresh JVM (default 30, quick 0)")
    parser.add_argument("--pin-server", action="store_true",
                        help="every other benchmark's layout: server side (bridge, Spark local[1]) on CPU 0, "
                        "producer on CPU 1 (default: the bridge's defaults, Spark local[*], nothing pinned)")
    parser.add_argument("--json", type=Path, help="also write the summary as JSON to this file")
    args = parser.parse_args(argv)
    seconds = args.seconds or (1.0 if args.quick else 10.0)
    warmup = args.warmup if args.warmup is not None else (0.5 if args.quick else 5.0)
    rates = [int(r) for r in args.rates.split(",")]
    jvm_warmup = args.jvm_warmup if args.jvm_warmup is not None else (0.0 if args.quick else 30.0)
    params = {
        "rates": rates, "seconds": seconds, "pin_server": args.pin_server, "warmup": warmup, "bound": 300.0, "jvm_warmup": jvm_warmup,
        "floor_warmup": 2.0 if args.quick else 5.0, "floor_seconds": 2.0 if args.quick else seconds,
    }  # fmt: skip
    from aqueduct.runtime.certs import generate_certs
    from bench.harness import CLIENT_CPU, SERVER_CPU, WorkerPair

    with tempfile.TemporaryDirectory(prefix="aqueduct-latency-") as tmp:
        generate_certs(Path(tmp) / "certs")
        print(f"latency: rates {rates}, {warmup:g} s warm-up + {seconds:g} s each ...", file=sys.stderr, flush=True)
        cpus = (SERVER_CPU, CLIENT_CPU) if args.pin_server else (None, None)
        with WorkerPair(Path(tmp) / "certs", cpus=cpus) as pair:
            timeout = 600 + jvm_warmup + len(rates) * (seconds + warmup + params["floor_warmup"] + params["floor_seconds"] + 60)
            result = pair.run("latency.bridge", params, timeout)
    summary = summarize(result["server"], result["client"])
    print(render(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

