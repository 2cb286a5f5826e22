"""``python -m bench.source_planning``: tasks, files and time by data volume, not stream count.

For each stream count N, a log holds ``--rows`` records of ``--size`` bytes
spread over N streams (one complete epoch each). Two measurements:

- **planning**, in this process without Spark: what the source's planner
  worker does (``latestOffset`` then ``partitions``) for a new query
  (cold: every index read, everything planned) and per trigger of a query
  that is caught up while 10 streams get a new epoch (the change journal:
  only those are read again), medians of ``--repeat`` runs;
- **one micro-batch**, under local Spark (``local[2]``): an ``availableNow``
  query of the whole log into Parquet, with its wall time, Spark's own
  ``triggerExecution`` duration, the number of input partitions (tasks)
  and of Parquet files written.

Issue 18's target: 2,000 streams, 100,000 rows of 100 bytes, under 50
files and under 5 s.

``--reload`` measures instead what one planner reload of a busy stream
costs as its index grows (issue 29): one stream gets group commits of one
record each until its index holds each of ``--entries`` entries; there,
``--repeat`` times, one more group commit and then the planner's reload
(``LogSnapshots.load``: the change journal names the stream, its index's
appended entries are read) against a full read of the same index (what
every reload cost before). Medians in ms.

Progress goes to stderr; ``--json`` writes the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def build_log(path: Path, streams: int, rows: int, size: int) -> None:
    from aqueduct.bridge.storage.log import DurableLog
    from aqueduct.connector.frames import ConnectorMessage

    per_stream = max(1, rows // streams)
    payload = b"x" * size
    with DurableLog(path) as log:
        for sid in range(streams):
            log.open_stream(sid, f"device-{sid}", "bench/1", boundaries=True)
            for i in range(per_stream):
                log.append(ConnectorMessage.build(sid, payload, message_id=i))
            log.append(ConnectorMessage.build(sid, message_id=per_stream, boundary=True))
        log.commit()


def planning(path: Path, streams: int, repeat: int) -> dict[str, Any]:
    """Cold planning (every index read) and a steady trigger (caught up; 10 streams got an epoch)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from aqueduct.bridge.source.datasource import SPARK_STRUCT, AqueductDataSource
    from aqueduct.bridge.storage.log import DurableLog
    from aqueduct.connector.frames import ConnectorMessage

    colds, steadies, parts = [], [], 0
    with DurableLog(path) as log:  # the writer keeps appending while the source plans
        next_id = {sid: log.durable_end(sid) for sid in range(min(10, streams))}
        for _ in range(repeat):
            reader = AqueductDataSource({"log": str(path), "consumer": "bench"}).streamReader(SPARK_STRUCT)
            t = time.perf_counter()
            start = reader.initialOffset()
            end = reader.next_end(start, ReadAllAvailable())
            parts = len(reader.partitions(start, end))
            colds.append(time.perf_counter() - t)
            for _ in range(5):
                for sid in next_id:
                    log.append(ConnectorMessage.build(sid, b"x" * 100, message_id=next_id[sid]))
                    log.append(ConnectorMessage.build(sid, message_id=next_id[sid] + 1, boundary=True))
                    next_id[sid] += 2
                log.commit()
                t = time.perf_counter()
                nxt = reader.next_end(end, ReadAllAvailable())
                reader.partitions(end, nxt)
                steadies.append(time.perf_counter() - t)
                end = nxt
    return {
        "plan_cold_ms": round(statistics.median(colds) * 1000, 1),
        "plan_trigger_ms": round(statistics.median(steadies) * 1000, 2),
        "partitions": parts,
    }


def reload_cost(path: Path, sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    """A planner's reload of one stream after a group commit, and a full read, as its index grows."""
    from aqueduct.bridge.storage.index import read_index
    from aqueduct.bridge.storage.log import DurableLog
    from aqueduct.bridge.storage.view import LogSnapshots
    from aqueduct.connector.frames import ConnectorMessage

    rows = []
    index = path / "streams" / "1" / "index"
    with DurableLog(path) as log:
        log.open_stream(1, "busy", "bench/1").result()
        snapshots = LogSnapshots(path)
        n = 0

        def group_commit() -> None:
            nonlocal n
            log.append(ConnectorMessage.build(1, b"x" * 100, message_id=n))
            log.commit()
            n += 1

        for size in sorted(sizes):
            print(f"growing the index to {size:,} entries ...", file=sys.stderr, flush=True)
            while n < size - repeat:
                group_commit()
            snapshots.load()
            reloads, fulls = [], []
            for _ in range(repeat):
                group_commit()
                t = time.perf_counter()
                snapshots.load()
                reloads.append(time.perf_counter() - t)
                t = time.perf_counter()
                read_index(index)
                fulls.append(time.perf_counter() - t)
            assert len(snapshots.load()[1].entries) == n
            rows.append({
                "entries": n,
                "reload_ms": round(statistics.median(reloads) * 1000, 3),
                "full_read_ms": round(statistics.median(fulls) * 1000, 2),
            })  # fmt: skip
            print(f"{n:>8,} {rows[-1]['reload_ms']:>10} {rows[-1]['full_read_ms']:>12}", flush=True)
    return rows


def one_batch(spark: Any, path: Path, out: Path) -> dict[str, Any]:
    t = time.perf_counter()
    q = (
        spark.readStream.format("aqueduct").option("log", str(path)).option("consumer", "spark").load()
        .writeStream.format("parquet").option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "ck")).trigger(availableNow=True).start()
    )  # fmt: skip
    q.awaitTermination(600)
    wall = time.perf_counter() - t
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    batches = [p for p in q.recentProgress if p["numInputRows"]]
    return {
        "batch_wall_s": round(wall, 2),
        "trigger_s": round(sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000, 2),
        "rows_written": sum(p["numInputRows"] for p in batches),
        "files": len(list((out / "data").glob("*.parquet"))),
    }


def session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from aqueduct.bridge.source import register

    spark = (
        SparkSession.builder.master("local[2]").appName("bench-source-planning")
        .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate()
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[10, 100, 1000, 2000, 10000])
    parser.add_argument("--rows", type=int, default=100_000, help="records in the log, over all streams")
    parser.add_argument("--size", type=int, default=100, help="payload bytes per record")
    parser.add_argument("--repeat", type=int, default=3, help="planning repetitions (median)")
    parser.add_argument("--no-spark", action="store_true", help="planning only")
    parser.add_argument("--reload", action="store_true",
                        help="measure a busy stream's reload against its index's size instead (no Spark)")
    parser.add_argument("--entries", type=int, nargs="+", default=[1_500, 5_000, 20_000],
                        help="--reload: index sizes to measure at")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    if args.reload:
        print(f"{'entries':>8} {'reload ms':>10} {'full read ms':>12}")
        with tempfile.TemporaryDirectory(prefix="aq-reload-") as tmp:
            rows = reload_cost(Path(tmp) / "log", args.entries, args.repeat)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2))
        return 0
    spark = None if args.no_spark else session()
    results = []
    print(f"{'streams':>7} {'rows':>8} {'cold plan ms':>12} {'trigger plan ms':>15} {'tasks':>5} "
          f"{'files':>5} {'batch s':>7} {'trigger s':>9}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="aq-planning-") as tmp:
        for n in args.streams:
            print(f"building a log of {n:,} streams ...", file=sys.stderr, flush=True)
            path = Path(tmp) / f"log-{n}"
            build_log(path, n, args.rows, args.size)
            row: dict[str, Any] = {"streams": n, "rows": args.rows, "size": args.size}
            print(f"planning {n:,} streams ...", file=sys.stderr, flush=True)
            row |= planning(path, n, args.repeat)
            if spark is not None:
                print(f"one micro-batch over {n:,} streams ...", file=sys.stderr, flush=True)
                row |= one_batch(spark, path, Path(tmp) / f"out-{n}")
            results.append(row)
            print(f"{n:>7,} {args.rows:>8,} {row['plan_cold_ms']:>12} {row['plan_trigger_ms']:>15} "
                  f"{row['partitions']:>5} {row.get('files', '-'):>5} {row.get('batch_wall_s', '-'):>7} "
                  f"{row.get('trigger_s', '-'):>9}", flush=True)  # fmt: skip
    if spark is not None:
        spark.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
