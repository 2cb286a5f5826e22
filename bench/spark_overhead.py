"""``python -m bench.spark_overhead``: the CPU Spark spends per micro-batch and per record, without the bridge.

``spark_e2e`` runs the bridge and Spark on one core, so every core-second
a micro-batch costs is taken from ingest. This measures that cost alone:
a streaming query (``local[1]``, pinned to CPU 0 like the benchmark
server, 1 s trigger, Parquet file sink) fed by Spark's built-in ``rate``
source; by Spark's built-in Parquet file source, from files of the same
rows (stream id, message id, 100-byte payload) that a thread of this
process writes every 100 ms; and by the ``aqueduct`` source from a log
that a thread fills at the same rate, in group commits every 100 ms. The
cores used (this process plus its children: the JVM and Python workers)
over a measured window after a warm-up, per second and per record, and
the median ``addBatch`` time, say how much of a core Spark needs per
trigger and per record for each source.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

SOURCES = ("rate", "parquet", "aqueduct")


def _cpu_seconds(me: psutil.Process) -> float:
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def _fill_log(path: Path, rate: int, stop: threading.Event, every: float = 0.1) -> None:
    """Append ``rate`` 100-byte records per second in group commits ``every`` seconds."""
    from aqueduct.bridge.storage.log import DurableLog
    from aqueduct.connector.frames import ConnectorMessage

    with DurableLog(path) as log:
        log.open_stream(1, "bench", "overhead/1")
        per_tick, next_id, tick = round(rate * every), 0, time.monotonic()
        while not stop.is_set():
            for _ in range(per_tick):
                log.append(ConnectorMessage.build(1, b"x" * 100, message_id=next_id))
                next_id += 1
            log.commit()
            tick += every
            stop.wait(max(0.0, tick - time.monotonic()))


def _fill_files(path: Path, rate: int, stop: threading.Event) -> None:
    """Write ``rate`` rows per second as Parquet files every 100 ms (the file source's input)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.mkdir(parents=True, exist_ok=True)
    per_tick, next_id, tick, n = rate // 10, 0, time.monotonic(), 0
    while per_tick and not stop.is_set():
        ids = pa.array(range(next_id, next_id + per_tick), pa.int64())
        table = pa.table({
            "stream_id": pa.repeat(pa.scalar(1, pa.int64()), per_tick),
            "message_id": ids,
            "payload": pa.array([b"x" * 100] * per_tick, pa.binary()),
        })  # fmt: skip
        pq.write_table(table, path / f".{n}.tmp")
        os.replace(path / f".{n}.tmp", path / f"part-{n:08d}.parquet")  # the source lists whole files only
        next_id, n = next_id + per_tick, n + 1
        tick += 0.1
        stop.wait(max(0.0, tick - time.monotonic()))


def _stop_between_triggers(query: Any, wait: float = 5.0) -> None:
    """Stop ``query`` while no trigger runs, if one ends within ``wait`` seconds.

    Stopping interrupts the query's thread; caught while a Python source
    plans its next batch, Spark logs the interrupted socket write as an
    aborted job with a long stack trace, which reads like a failure of
    the measurement (it is not: the measured window has ended).
    """
    deadline = time.monotonic() + wait
    while query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.02)
    query.stop()


def measure(
    spark: Any, source: str, rate: int, warmup: float, seconds: float, trigger: str = "1 second",
    idle_wait: str = "0", commit_every: float = 0.1,
) -> dict[str, Any]:
    """One query: cores used and median addBatch over ``seconds`` after ``warmup``."""
    stop = threading.Event()
    with tempfile.TemporaryDirectory(prefix="aqueduct-spark-overhead-") as tmp:
        work = Path(tmp)
        filler = None
        if source == "rate":
            frame = spark.readStream.format("rate").option("rowsPerSecond", rate).load()
        elif source == "parquet":
            filler = threading.Thread(target=_fill_files, args=(work / "in", rate, stop), daemon=True)
            filler.start()
            schema = "stream_id BIGINT, message_id BIGINT, payload BINARY"
            frame = spark.readStream.format("parquet").schema(schema).load(str(work / "in"))
        else:
            filler = threading.Thread(target=_fill_log, args=(work / "log", rate, stop, commit_every), daemon=True)
            filler.start()
            while not (work / "log" / "streams").exists():
                time.sleep(0.05)
            frame = (
                spark.readStream.format("aqueduct").option("log", str(work / "log"))
                .option("idleWait", idle_wait).load()
            )  # fmt: skip
        query = (
            frame.writeStream.format("parquet")
            .option("path", str(work / "out"))
            .option("checkpointLocation", str(work / "checkpoint"))
            .trigger(processingTime=trigger)
            .start()
        )
        try:
            me = psutil.Process()
            time.sleep(warmup)
            first, cpu0, t0 = len(query.recentProgress), _cpu_seconds(me), time.monotonic()
            time.sleep(seconds)
            cpu1, t1 = _cpu_seconds(me), time.monotonic()
            progress = query.recentProgress[first:]
        finally:
            stop.set()
            if filler is not None:
                filler.join(10)
            _stop_between_triggers(query)
    add_batch = [p["durationMs"].get("addBatch", 0) for p in progress]
    return {
        "source": source,
        "rate": rate,
        "batches": len(progress),
        "rows": sum(p["numInputRows"] for p in progress),
        "cores": (cpu1 - cpu0) / (t1 - t0),
        "cpu_us_per_record": (cpu1 - cpu0) * 1e6 / max(1, sum(p["numInputRows"] for p in progress)),
        "add_batch_ms_p50": statistics.median(add_batch) if add_batch else None,
        "trigger_ms_p50": statistics.median(p["durationMs"].get("triggerExecution", 0) for p in progress)
        if progress else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_overhead", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="10,20000", help="records per second to try (default: %(default)s)")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds before measuring (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds measured (default: %(default)s)")
    parser.add_argument("--trigger", default="1 second", help="processingTime of every query (default: %(default)s)")
    parser.add_argument("--idle-wait", default="0", help="the aqueduct source's idleWait (default: %(default)s)")
    parser.add_argument(
        "--commit-every", type=float, default=0.1,
        help="seconds between the aqueduct log's group commits (default: %(default)s)",
    )
    parser.add_argument("--sources", default=",".join(SOURCES), help="sources to measure (default: %(default)s)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    rates = [int(r) for r in args.rates.split(",")]
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})  # the benchmark server's core; the JVM inherits it
    from aqueduct.bridge.source import register
    from bench.bridge_bench import spark_session

    spark = spark_session()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    results = []
    try:
        print(f"{'source':<10} {'rec/s':>7} {'batches':>7} {'rows':>9} {'cores':>6} {'CPU us/rec':>10} {'addBatch p50 ms':>16} {'trigger p50 ms':>15}")
        for rate in rates:
            for source in args.sources.split(","):
                if rate == 0 and source == "rate":
                    continue  # the rate source needs rows; idle, the file source is Spark's own
                print(f"measuring {source} source at {rate} rec/s ...", file=sys.stderr, flush=True)
                r = measure(
                    spark, source, rate, args.warmup, args.seconds, args.trigger, args.idle_wait, args.commit_every
                )
                results.append(r)
                print(
                    f"{r['source']:<10} {r['rate']:>7} {r['batches']:>7} {r['rows']:>9} "
                    f"{r['cores']:>6.2f} {r['cpu_us_per_record']:>10.1f} {r['add_batch_ms_p50'] or 0:>16.0f} {r['trigger_ms_p50'] or 0:>15.0f}",
                    flush=True,
                )
    finally:
        spark.stop()
    if args.json:
        args.json.write_text(json.dumps({"results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
