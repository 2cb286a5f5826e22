"""``python -m bench.failover``: what losing a bridge costs its producers, and what each bridge costs planning.

Producers -> ``aqueduct-bridge serve --ingest-only`` processes -> one query
reading every bridge with ``failover=true`` (one stream per stream id
across bridges), the fleet of the failover tests
(:mod:`bench.fleet_processes`). Three figures:

- **stall**: two bridges, four producers (two starting on each, every one
  given both URLs, the connector's default ``move_after`` of 3 s), the
  query on ``local[2]`` in this process into Parquet. Once every producer's
  records reach the sink, bridge 1 is SIGKILLed and its log deleted; the
  figure is the longest ACK stall since the kill (the longest time a
  producer held unacked records while no ACK came; a stall under way at
  the kill counts whole) of every producer, of those that moved and of
  those that did not, and (the pace it is measured against) the longest
  between every producer's first ACK and the kill, per run; median and max
  over ``--repeat`` runs with
  ``replicas=1`` and as many with ``replicas=2`` (every stream sent to both
  bridges: nobody moves), alternating, each on fresh bridges and a fresh
  query. Every run ends with the sink checked: every record once with its
  payload.
- **replicas**: records acked per second with ``replicas=2`` against 1
  (every producer sends each stream to both bridges), the same fleet
  without a fault, alternating ``--repeat`` times on one Spark session,
  producers with the connector's default buffer; medians and their ratio
  (reported as not measurable where the connector has no ``replicas``).
- **planning**: 1, 10 and 50 (``--bridges``) ingest-only bridges behind
  one failover reader, per trigger, the bridges called one after the other
  and side by side: :mod:`bench.failover_planning`.

Progress goes to stderr; ``--json`` writes the rows; ``--quick`` is a
smoke run (one stall run, 1 and 3 bridges).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aqueduct.connector.producer.client import DEFAULT_MAX_BUFFER

TIMEOUT = 300.0  # seconds: a hang guard only


def _log(text: str) -> None:
    print(f"failover: {text}", file=sys.stderr, flush=True)


async def stall_run(spark: Any, root: Path, events: int, replicas: int) -> dict[str, Any]:
    """One kill (:func:`~bench.fleet_processes.lose_a_bridge`), producers with ``replicas``: the longest ACK stalls since it."""
    from bench.fleet_processes import Fleet, lose_a_bridge
    from demo.workload import Workload

    fleet = Fleet(root)
    try:
        killed = time.monotonic()
        workload = Workload(producers=4, streams=2, events=events, epoch=40)
        verdict = await lose_a_bridge(fleet, spark, workload, TIMEOUT, replicas=replicas)
        verdict.check()
        moved = [p.stall.longest for p in fleet.producers if p.moves]
        stayed = [p.stall.longest for p in fleet.producers if not p.moves]
        return {
            "replicas": replicas, "stall_s": round(verdict.longest_stall, 2),
            "before_kill_s": round(max(p.stall.before_fault for p in fleet.producers), 2),
            "moved_stall_s": round(max(moved), 2) if moved else None,
            "others_stall_s": round(max(stayed), 2) if stayed else None,
            "moved": len(moved), "run_s": round(time.monotonic() - killed, 2),
        }  # fmt: skip
    finally:
        await fleet.close()


@contextlib.contextmanager
def _session() -> Iterator[Any]:
    """A ``local[2]`` session with the source registered, stopped at the end."""
    from aqueduct.bridge.app.pipeline import local_session
    from aqueduct.bridge.source import register

    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable  # workers import aqueduct
    spark = local_session("local[2]", "ERROR", app_name="aqueduct-bench-failover")
    register(spark)
    try:
        yield spark
    finally:
        spark.stop()


def stall(args: argparse.Namespace) -> dict[str, Any]:
    """The longest ACK stall after a kill, with ``replicas`` 1 and 2 alternating; median and max of each."""
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    with _session() as spark:
        for i in range(args.repeat):
            for n in (1, 2):
                with tempfile.TemporaryDirectory(prefix="aq-failover-") as tmp:
                    run = asyncio.run(stall_run(spark, Path(tmp) / f"run{n}-{i}", args.events, n))
                runs[n].append(run)
                _log(f"stall run {i + 1}/{args.repeat}, replicas={n}: {run}")
    row: dict[str, Any] = {"events_per_producer": args.events}
    for n, done in runs.items():
        for key in ("stall_s", "moved_stall_s", "others_stall_s", "before_kill_s"):
            values = [r[key] for r in done if r[key] is not None]
            if values:
                row[f"replicas_{n}_{key[:-2]}_median_s"] = statistics.median(values)
                row[f"replicas_{n}_{key[:-2]}_max_s"] = max(values)
        row[f"replicas_{n}_runs"] = done
    return row


async def throughput_run(spark: Any, root: Path, events: int, replicas: int) -> float:
    """Records acked per second, four producers over two bridges with ``replicas``, from their first send."""
    from bench.fleet_processes import Fleet, bridge_options, rotated
    from demo.workload import Workload

    workload = Workload(producers=4, streams=2, events=events, epoch=40)
    fleet = Fleet(root)
    try:
        b1, b2 = await fleet.add_bridges("b1", "b2")
        fleet.start_query(spark, bridge_options([b1, b2]))
        started = time.perf_counter()
        fleet.start_producers(workload, lambda p: rotated(fleet.urls("b1", "b2"), p), replicas=replicas,
                              max_buffer=DEFAULT_MAX_BUFFER)  # fmt: skip
        verdict = await fleet.verdict(workload, TIMEOUT)
        verdict.check()
        return workload.total / (time.perf_counter() - started)
    finally:
        await fleet.close()


def replicas(args: argparse.Namespace) -> dict[str, Any]:
    """Throughput with ``replicas=2`` against 1, alternating, on one Spark session; medians and their ratio."""
    from aqueduct.connector import Connector

    if "replicas" not in inspect.signature(Connector).parameters:
        return {"measurable": False, "why": "the connector has no replicas option"}
    rates: dict[int, list[float]] = {1: [], 2: []}
    with _session() as spark:
        for i in range(args.repeat):
            for n in (1, 2):
                with tempfile.TemporaryDirectory(prefix="aq-failover-rep-") as tmp:
                    rates[n].append(asyncio.run(throughput_run(spark, Path(tmp) / f"r{n}-{i}", args.events, n)))
                _log(f"replicas={n} run {i + 1}/{args.repeat}: {rates[n][-1]:,.0f} records/s")
    one, two = statistics.median(rates[1]), statistics.median(rates[2])
    return {
        "measurable": True, "events_per_producer": args.events, "replicas_1_records_s": round(one),
        "replicas_2_records_s": round(two), "ratio": round(two / one, 3),
        "runs": {str(k): [round(r) for r in v] for k, v in rates.items()},
    }  # fmt: skip


def planning(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The planning figure: :mod:`bench.failover_planning` (sequential and concurrent bridge calls, same run)."""
    from aqueduct.bridge.source.bridge_calls import CONCURRENT_CALLS
    from bench.failover_planning import planning as planning_rows

    return planning_rows(args.bridges, [1, CONCURRENT_CALLS], args.triggers, args.interval)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5, help="stall runs (a kill each) per replicas value, and throughput runs; median and max (default: %(default)s)")
    p.add_argument("--events", type=int, default=3000, help="records per producer in a stall run (default: %(default)s)")
    p.add_argument("--bridges", type=lambda s: [int(x) for x in s.split(",")], default=[1, 10, 50],
                   help="bridge counts of the planning figure (default: 1,10,50)")  # fmt: skip
    p.add_argument("--triggers", type=int, default=20, help="triggers timed per bridge count (default: %(default)s)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between triggers (default: %(default)s)")
    p.add_argument("--only", choices=("stall", "replicas", "planning"), help="one figure only")
    p.add_argument("--quick", action="store_true", help="one stall run, planning over 1 and 3 bridges: a smoke run")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the rows here")
    args = p.parse_args(argv)
    if args.quick:
        args.repeat, args.events, args.bridges, args.triggers = 1, 1500, [1, 3], 5
    row: dict[str, Any] = {}
    if args.only in (None, "stall"):
        row["stall"] = stall(args)
    if args.only in (None, "replicas"):
        row["replicas"] = replicas(args)
    if args.only in (None, "planning"):
        row["planning"] = planning(args)
    print(json.dumps(row, indent=2))
    if args.json:
        args.json.write_text(json.dumps(row, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
