"""``python -m bench.bridges_scaleout``: one query over two ingest-only bridges vs over one, end to end.

The scale-out layout of ``docs/bridge.md`` ("Spark on a cluster"):
producers -> ``aqueduct-bridge serve --ingest-only`` (a process each:
listeners, log, Flight server) -> one Spark query reading every bridge over
Flight (TLS, token) as consumer ``default``, whose commits ack the
producers. ``--producers`` producers send ``--events`` records each (epochs
of ``--epoch``) over TCP and wait for every ack; the rate is records acked
per second, from the first send (once the query ran its first trigger)
to the last ack: the whole path, durable
log, planning, Flight read, sink commit and ack. Layouts, alternating,
``--repeat`` times, each run on fresh logs and a fresh query:

- ``one``: one bridge takes every producer;
- ``two``: two bridges take half the producers each, and the query reads
  both (``option("bridge", "a=...,b=...")``).

The figure is each layout's median rate and their ratio (two over one).
Spark runs ``local[2]`` in this process with the ``noop`` sink (what is
measured is the bridges and the read path, not a file sink). On one
machine the bridges, producers and Spark share its cores, so the ratio
says what a second bridge costs or gains *here*; on separate hosts each
bridge brings its own. Progress goes to stderr; ``--json`` writes the row;
``--quick`` is a smoke run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TIMEOUT = 300.0  # seconds: a hang guard only


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _start_bridge(log: Path, stderr: Path) -> tuple[asyncio.subprocess.Process, int, int]:
    """An ingest-only bridge on loopback: (process, TCP port, Flight port), once it serves Flight."""
    tcp, fl = _free_port(), _free_port()
    with open(stderr, "ab") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "aqueduct.bridge.app.cli", "serve", "--ingest-only",
            "--tcp", f"127.0.0.1:{tcp}", "--log", str(log), "--flight", f"127.0.0.1:{fl}",
            "--status-interval", "1", stdout=out, stderr=out,
        )  # fmt: skip
    deadline = time.monotonic() + TIMEOUT
    while "log served over Flight" not in stderr.read_text(errors="replace"):
        if proc.returncode is not None or time.monotonic() > deadline:
            raise RuntimeError(f"bridge did not start: {stderr.read_text(errors='replace')[-2000:]}")
        await asyncio.sleep(0.1)
    return proc, tcp, fl


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def one_run(spark: Any, bridges: int, args: argparse.Namespace, tmp: Path) -> float:
    """Records acked per second with ``bridges`` bridges behind one query."""
    from demo.producer import produce
    from demo.workload import Workload

    names = ["a", "b"][:bridges]
    started_bridges = []
    query = None
    try:
        for n in names:
            started_bridges.append(await _start_bridge(tmp / n / "log", tmp / f"{n}.stderr"))
        tls = {n: tmp / n / "log" / "tls" for n in names}
        if bridges == 1:
            options = {"bridge": f"127.0.0.1:{started_bridges[0][2]}",
                       "bridgeTokenFile": str(tls["a"] / "flight.token"), "bridgeCA": str(tls["a"] / "ca.pem")}  # fmt: skip
        else:
            options = {
                "bridge": ",".join(f"{n}=127.0.0.1:{b[2]}" for n, b in zip(names, started_bridges, strict=True)),
                "bridgeTokenFile": ",".join(f"{n}={tls[n] / 'flight.token'}" for n in names),
                "bridgeCA": ",".join(f"{n}={tls[n] / 'ca.pem'}" for n in names),
            }
        df = spark.readStream.format("aqueduct").options(**options).option("consumer", "default").load()
        query = (
            df.writeStream.format("noop").option("checkpointLocation", str(tmp / "checkpoint"))
            .trigger(processingTime="0.2 seconds").start()
        )  # fmt: skip
        deadline = time.monotonic() + TIMEOUT
        while query.lastProgress is None:  # the query's start (sessions, Python workers) is not the rate
            if time.monotonic() > deadline or not query.isActive:
                raise RuntimeError(f"the query did not run its first trigger: {query.exception()}")
            await asyncio.sleep(0.1)
        workload = Workload(producers=args.producers, streams=2, events=args.events, epoch=args.epoch)
        started = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(
            produce(f"tcp://127.0.0.1:{started_bridges[p % bridges][1]}", workload, p, timeout=TIMEOUT)
            for p in range(args.producers)
        )), TIMEOUT)  # fmt: skip
        return workload.total / (time.perf_counter() - started)
    finally:
        if query is not None:
            query.stop()
        for proc, _, _ in started_bridges:
            await _stop(proc)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from aqueduct.bridge.app.pipeline import local_session
    from aqueduct.bridge.source import register

    spark = local_session("local[2]", "WARN", app_name="aqueduct-bench-scaleout")
    register(spark)
    rates: dict[str, list[float]] = {"one": [], "two": []}
    try:
        for i in range(args.repeat):
            for layout, bridges in (("one", 1), ("two", 2)):
                with tempfile.TemporaryDirectory(prefix="aq-scaleout-") as tmp:
                    rate = asyncio.run(one_run(spark, bridges, args, Path(tmp)))
                rates[layout].append(rate)
                print(f"bridges_scaleout: run {i + 1}/{args.repeat} {layout}: {rate:,.0f} records/s",
                      file=sys.stderr, flush=True)  # fmt: skip
    finally:
        spark.stop()
    one, two = statistics.median(rates["one"]), statistics.median(rates["two"])
    return {
        "producers": args.producers, "records": args.producers * args.events, "repeat": args.repeat,
        "one_bridge_records_s": round(one), "two_bridges_records_s": round(two), "ratio": round(two / one, 3),
        "runs": {k: [round(r) for r in v] for k, v in rates.items()},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bridges_scaleout", description=__doc__.splitlines()[0])
    p.add_argument("--producers", type=int, default=4, help="producers, split over the bridges (default: %(default)s)")
    p.add_argument("--events", type=int, default=20_000, help="records per producer (default: %(default)s)")
    p.add_argument("--epoch", type=int, default=500, help="records per epoch (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each layout; medians (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="2 producers of 5,000 records, one run each: a smoke run")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the result row here")
    args = p.parse_args(argv)
    if args.quick:
        args.producers, args.events, args.repeat = 2, 5_000, 1
    row = measure(args)
    print(
        f"bridges_scaleout: {row['records']:,} records from {row['producers']} producers: one bridge "
        f"{row['one_bridge_records_s']:,} records/s, two bridges {row['two_bridges_records_s']:,} records/s, "
        f"ratio {row['ratio']}"
    )
    if args.json:
        args.json.write_text(json.dumps(row, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
