"""``python -m bench.failover``: what losing a bridge costs its producers, and what each bridge costs planning.

Producers -> ``aqueduct-bridge serve --ingest-only`` processes -> one query
reading every bridge with ``failover=true`` (one stream per stream id
across bridges), the fleet of the failover tests
(:mod:`tests.spark.bridge_fleet`). Three figures:

- **stall**: two bridges, four producers (two starting on each, every one
  given both URLs, the connector's default ``move_after`` of 3 s), the
  query on ``local[2]`` in this process into Parquet. Once every producer's
  records reach the sink, bridge 1 is SIGKILLed and its log deleted; the
  figure is the longest ACK stall since the kill (the longest time a
  producer held unacked records while no ACK came; a stall under way at
  the kill counts whole) of the producers that moved, and of those that
  did not, per run; median and max over ``--repeat`` runs, each on fresh
  bridges and a fresh query. Every run ends with the sink checked: every
  record once with its payload.
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


async def stall_run(spark: Any, root: Path, events: int) -> dict[str, Any]:
    """One kill (:func:`~tests.spark.bridge_fleet.lose_a_bridge`): the longest ACK stalls since it."""
    from demo.workload import Workload
    from tests.spark.bridge_fleet import Fleet, lose_a_bridge

    fleet = Fleet(root)
    try:
        killed = time.monotonic()
        verdict = await lose_a_bridge(fleet, spark, Workload(producers=4, streams=2, events=events, epoch=40), TIMEOUT)
        verdict.check()
        moved = [p.stall.longest for p in fleet.producers if p.moves]
        stayed = [p.stall.longest for p in fleet.producers if not p.moves]
        return {
            "moved_stall_s": round(max(moved), 2), "others_stall_s": round(max(stayed, default=0.0), 2),
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
    runs = []
    with _session() as spark:
        for i in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="aq-failover-") as tmp:
                run = asyncio.run(stall_run(spark, Path(tmp) / f"run{i}", args.events))
            runs.append(run)
            _log(f"stall run {i + 1}/{args.repeat}: {run}")
    moved = [r["moved_stall_s"] for r in runs]
    others = [r["others_stall_s"] for r in runs]
    return {
        "runs": runs, "events_per_producer": args.events,
        "moved_stall_median_s": statistics.median(moved), "moved_stall_max_s": max(moved),
        "others_stall_median_s": statistics.median(others), "others_stall_max_s": max(others),
    }  # fmt: skip


async def throughput_run(spark: Any, root: Path, events: int, replicas: int) -> float:
    """Records acked per second, four producers over two bridges with ``replicas``, from their first send."""
    from demo.workload import Workload
    from tests.spark.bridge_fleet import Fleet, bridge_options, rotated

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
    p.add_argument("--repeat", type=int, default=5, help="stall runs (a kill each); median and max (default: %(default)s)")
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
