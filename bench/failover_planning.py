"""``python -m bench.failover_planning``: what each bridge behind a failover query costs its planning, per trigger.

N (``--bridges``: 1, 10, 50) ``aqueduct-bridge serve --ingest-only``
processes (the fleet of the failover tests, :mod:`bench.fleet_processes`),
one producer on each sending an epoch of 10 records every 0.5 s, and
failover readers over all of them through a ``bridgeList`` file, driven
as Spark's planner worker drives one (``latestOffset``, which first
commits the previous batch to every bridge, then ``partitions``) once per
``--interval``, in this process without Spark. Median and p90 of
``--triggers`` triggers.

Each ``--calls`` value is a reader calling that many bridges at once
(:mod:`aqueduct.bridge.source.bridge_calls`; ``1``: one after the other,
the planner before it called them side by side), all on the same fleet
at the same time, their triggers taken in turn (the first one first, then
the next, the order rotating every trigger), so that they meet the same
machine load: a before and after in one run. Each reader is its own
consumer. ``cpu_median_ms`` is this process's CPU time during a trigger
(the planner's threads, and the producers' sends meanwhile): what calling
bridges side by side cannot overlap on the driver.

``--dropped-call`` adds one more reader, calling as many bridges at once
as the last ``--calls`` value, that asks each bridge "was the consumer
dropped?" in a call of its own at every trigger (``check_consumer``, as
readers did before the ``streams`` answer said so, and still do against
older bridges): three calls per bridge per trigger against two, same run.

``bench.failover --only planning`` runs this with its defaults.
Progress goes to stderr; ``--json`` writes the rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _log(text: str) -> None:
    print(f"failover planning: {text}", file=sys.stderr, flush=True)


def _summary(times: list[float], cpu: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {
        "median_ms": round(1000 * statistics.median(times), 1),
        "p90_ms": round(1000 * times[int(0.9 * (len(times) - 1))], 1),
        "cpu_median_ms": round(1000 * statistics.median(cpu), 1),
    }


async def planning_at(
    root: Path, bridges: int, calls: list[int], triggers: int, interval: float, dropped_call: bool = False
) -> dict[str, Any]:
    """Trigger times of failover readers (one per ``calls`` value) over ``bridges`` bridges, each getting an epoch every 0.5 s."""
    from aqueduct.bridge.source.datasource import SPARK_STRUCT, AqueductDataSource
    from aqueduct.connector import Connector
    from bench.fleet_processes import Fleet, write_bridge_list

    fleet = Fleet(root)
    senders: list[asyncio.Task[None]] = []
    try:
        started = time.monotonic()
        for first in range(0, bridges, 10):  # ten at a time: fifty at once would starve each other's start
            await fleet.add_bridges(*(f"b{i}" for i in range(first, min(first + 10, bridges))))
        _log(f"{bridges} bridges up in {time.monotonic() - started:.1f} s")
        listing = root / "bridges.txt"
        write_bridge_list(listing, list(fleet.bridges.values()))

        async def send(index: int, url: str) -> None:
            async with Connector(url, program="bench-failover", instance=f"p{index}") as conn:
                stream = await conn.stream(index + 1, f"planning/{index}")
                while True:
                    await stream.send_many([b"x" * 100] * 10)
                    await stream.send(None, boundary=True)
                    await asyncio.sleep(0.5)

        senders = [asyncio.create_task(send(i, b.url)) for i, b in enumerate(fleet.bridges.values())]
        variants = [(f"calls_{limit}", limit) for limit in calls]
        variants += [(f"calls_{calls[-1]}_dropped_call", calls[-1])] if dropped_call else []
        readers = []
        for label, limit in variants:
            consumer = "default" if label == f"calls_{max(calls)}" else label.replace("_", "")  # acks from "default"
            reader = AqueductDataSource({"bridgeList": str(listing), "consumer": consumer}).streamReader(SPARK_STRUCT)
            reader.bridges.calls.limit = limit
            start = await asyncio.to_thread(reader.initialOffset)
            if label.endswith("_dropped_call"):
                for log in reader.bridges.logs.values():
                    log.consumer = None  # type: ignore[attr-defined] # its streams calls name no consumer: asked apart
            readers.append([label, reader, start, [], [], []])
        for turn in range(triggers):
            await asyncio.sleep(interval)
            for k in range(len(readers)):
                entry = readers[(turn + k) % len(readers)]
                _, reader, start, times, cpu, parts = entry
                t, c = time.perf_counter(), time.process_time()
                end = await asyncio.to_thread(reader.latestOffset)
                planned = await asyncio.to_thread(reader.partitions, start, end)
                times.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
                parts.append(len(planned))
                entry[2] = end
        row: dict[str, Any] = {"bridges": bridges, "triggers": triggers}
        for label, _, _, times, cpu, parts in readers:
            row[label] = _summary(times, cpu) | {"partitions_median": statistics.median(parts)}
        return row
    finally:
        for task in senders:
            task.cancel()
        await asyncio.gather(*senders, return_exceptions=True)
        await fleet.close()


def planning(
    bridges: list[int], calls: list[int], triggers: int, interval: float, dropped_call: bool = False
) -> list[dict[str, Any]]:
    """One row per bridge count (a fresh fleet each)."""
    rows = []
    for n in bridges:
        with tempfile.TemporaryDirectory(prefix="aq-failover-plan-") as tmp:
            row = asyncio.run(planning_at(Path(tmp), n, calls, triggers, interval, dropped_call))
        rows.append(row)
        _log(f"over {n} bridges: {row}")
    return rows


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    from aqueduct.bridge.source.bridge_calls import CONCURRENT_CALLS

    p = argparse.ArgumentParser(prog="python -m bench.failover_planning", description=__doc__.splitlines()[0])
    p.add_argument("--bridges", type=_ints, default=[1, 10, 50], help="bridge counts (default: 1,10,50)")
    p.add_argument("--calls", type=_ints, default=[1, CONCURRENT_CALLS],
                   help=f"bridges called at once, one reader each (default: 1,{CONCURRENT_CALLS})")  # fmt: skip
    p.add_argument("--triggers", type=int, default=20, help="triggers timed per reader (default: %(default)s)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between triggers (default: %(default)s)")
    p.add_argument("--dropped-call", action="store_true",
                   help="one more reader asking 'was the consumer dropped?' in a call of its own (3 calls a bridge)")  # fmt: skip
    p.add_argument("--json", type=Path, metavar="FILE", help="write the rows here")
    args = p.parse_args(argv)
    rows = planning(args.bridges, args.calls, args.triggers, args.interval, args.dropped_call)
    print(json.dumps(rows, indent=2))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
