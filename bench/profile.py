"""``python -m bench.profile NAME``: where our path of one benchmark spends its time.

Runs the benchmark's *ours* contender once (``--baseline``: its baseline
too) with cProfile on both the server (receiver) and the client (sender)
process, and prints each side's top functions by own time, as a share of
the process's total. Time in ``select.epoll.poll`` is the event loop waiting:
a side with much of it is not the bottleneck. cProfile slows small calls
down, so read shares, not absolute rates.
"""

from __future__ import annotations

import argparse
import io
import pstats
import sys
import tempfile
from pathlib import Path

from bench.benchmarks import BY_NAME
from bench.harness import WorkerPair
from bench.runner import Settings


def top_functions(prof: Path, limit: int) -> list[tuple[float, float, int, str]]:
    """(share of total own time, own seconds, calls, "file:line(function)"), largest first."""
    stats = pstats.Stats(str(prof), stream=io.StringIO())
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in entries.values()) or 1.0
    rows = []
    for (filename, line, func), (_cc, calls, tottime, _ct, _callers) in entries.items():
        short = filename.split("site-packages/")[-1].split("/work/main/")[-1]
        rows.append((tottime / total, tottime, calls, f"{short}:{line}({func})"))
    rows.sort(reverse=True)
    return rows[:limit]


def cumulative(prof: Path, limit: int) -> list[tuple[float, float, str]]:
    """(share of the run, cumulative seconds, function) for our own modules, largest first."""
    stats = pstats.Stats(str(prof), stream=io.StringIO())
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in entries.values()) or 1.0
    rows = [
        (ct / total, ct, f"{fn.split('/work/main/')[-1]}:{line}({func})")
        for (fn, line, func), (_cc, _calls, _tt, ct, _callers) in entries.items()
        if "/aqueduct/" in fn and "/site-packages/" not in fn
    ]
    rows.sort(reverse=True)
    return rows[:limit]


def render(title: str, prof: Path, limit: int) -> str:
    lines = [f"== {title}", "  own time   share  calls      function"]
    for share, tottime, calls, name in top_functions(prof, limit):
        lines.append(f"  {tottime:8.3f}s  {share * 100:5.1f}%  {calls:<9d}  {name}")
    ours = cumulative(prof, limit)
    if ours:
        lines.append("  -- aqueduct functions by cumulative time (callees included)")
        for share, ct, name in ours:
            lines.append(f"  {ct:8.3f}s  {share * 100:5.1f}%             {name}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=sorted(BY_NAME))
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds of sending (default 3)")
    parser.add_argument("--top", type=int, default=15, help="functions to list per side (default 15)")
    parser.add_argument("--baseline", action="store_true", help="profile the baseline as well")
    parser.add_argument("--keep", type=Path, help="keep the .prof files in this directory")
    parser.add_argument("--case", help="profile the contender whose label contains this text instead of ours")
    args = parser.parse_args(argv)
    bench = BY_NAME[args.name]
    settings = Settings(seconds=args.seconds, warmup=0.5, repeat=1)
    if args.case:
        chosen = [c for c in bench.cases if args.case in c.label]
        if len(chosen) != 1:
            parser.error(f"--case {args.case!r} matches {len(chosen)} of: {', '.join(c.label for c in bench.cases)}")
        cases = chosen
    else:
        cases = [bench.ours] + ([bench.baseline] if args.baseline and bench.baseline else [])
    with tempfile.TemporaryDirectory(prefix="aqueduct-profile-") as tmp:
        out = args.keep or Path(tmp) / "prof"
        out.mkdir(parents=True, exist_ok=True)
        from aqueduct.runtime.certs import generate_certs

        certs = generate_certs(Path(tmp) / "certs").ca.parent
        with WorkerPair(certs) as pair:
            for case in cases:
                result = pair.run(case.role, settings.params(case, 1), settings.timeout(case, 1), out)
                side = result[case.side]
                value = side["phases"][0][case.metric] if case.phased else side[case.metric]
                print(f"# {bench.name} / {case.label}: {value:,.1f} {bench.unit} (under cProfile)")
                for s in ("server", "client"):
                    print(render(f"{case.label}: {s}", out / f"{case.role}.{s}.prof", args.top))
                print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
