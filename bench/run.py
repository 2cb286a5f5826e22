"""``python -m bench.run``: every benchmark, ours beside its baseline, one table.

Each measurement starts a server and a client process on 127.0.0.1, pinned
to different cores; the receiver measures after a warm-up. Every contender
of a benchmark runs once per repetition, interleaved, so slow drift of the
machine hits all of them alike; the table shows the median and the spread
of the repetitions, and the ratio ours/baseline of the medians against the
DESIGN.md target.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.benchmarks import BENCHMARKS, BY_NAME
from bench.report import machine, table
from bench.runner import Settings, run_benchmark


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description="Aqueduct benchmarks: our paths vs raw aioquic / TCP baselines, side by side.",
        epilog="Benchmarks: " + ", ".join(b.name for b in BENCHMARKS),
    )
    parser.add_argument("--only", help="comma-separated benchmark names to run")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short runs, 2 repetitions, no Spark benchmarks unless named in --only (< ~2 min)",
    )
    parser.add_argument("--repeat", type=int, help="repetitions per contender (default 5, quick 2)")
    parser.add_argument(
        "--seconds", type=float, help="seconds of sending per run (default 2.5, quick 1; tiny for smoke tests)"
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="cProfile every run of both sides into DIR (slower)"
    )
    args = parser.parse_args(argv)
    if args.repeat is not None and args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.seconds is not None and not 0 < args.seconds <= 600:
        parser.error("--seconds must be in (0, 600]")
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in BY_NAME]
        if unknown:
            parser.error(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
        args.selected = [BY_NAME[n] for n in names]
    else:
        # Spark benchmarks need minutes to start on a small machine: not in a quick run.
        args.selected = [b for b in BENCHMARKS if not (args.quick and b.slow)]
    return args


def _exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C, so every worker process group gets killed on the way out."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    settings = Settings.quick(args.repeat) if args.quick else Settings.full(args.repeat)
    if args.seconds is not None:
        settings = replace(settings, seconds=args.seconds, warmup=min(settings.warmup, args.seconds / 4))
    info = machine()
    print(
        f"machine: {info['nproc']} cores ({info['cpu_model']}), Python {info['python']}, "
        f"aioquic {info['aioquic']}; {settings.repeat} repetitions x {settings.seconds:g} s; "
        f"load average {info['loadavg'][0]:.1f}",
        file=sys.stderr,
        flush=True,
    )
    began = time.monotonic()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="aqueduct-bench-") as tmp:
        from aqueduct.runtime.certs import generate_certs

        certs = Path(tmp) / "certs"
        generate_certs(certs)
        for bench in args.selected:
            print(f"{bench.name}: {bench.title}", file=sys.stderr, flush=True)
            if args.profile:
                args.profile.mkdir(parents=True, exist_ok=True)
            rows.append(run_benchmark(bench, settings, certs, args.profile))
    elapsed = time.monotonic() - began
    info["loadavg_after"] = list(os.getloadavg())
    print(table(rows))
    print(
        f"\n{len(rows)} benchmark(s) in {elapsed:.0f} s on {info['nproc']} cores ({info['cpu_model']}); "
        f"load average {info['loadavg'][0]:.1f} before, {info['loadavg_after'][0]:.1f} after"
    )
    if args.json:
        doc = {
            "machine": info,
            "settings": {"seconds": settings.seconds, "warmup": settings.warmup, "repeat": settings.repeat},
            "elapsed_seconds": elapsed,
            "benchmarks": rows,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
