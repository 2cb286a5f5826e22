"""``python -m bench.group_commit``: what one group commit costs when it touches thousands of streams.

A reconnect storm's group commits touch every stream of the fleet, each
with a few records (issue 41: 2,000 producers at 2 records a second), and
an admitted producer's ACK waits for about two of them. This measures
:meth:`DurableLog.commit <aqueduct.bridge.storage.log.DurableLog.commit>`
in-process, on a log in ``--dir`` (default: a temporary directory on the
disk the bridge's log would use), over ``--streams`` streams with
``--records`` records of ``--size`` bytes each per commit:

- ``steady``: a commit of a running log (the median of ``--commits``);
- ``restart``: the first commit after the log was closed and opened again
  (every stream's files reopened), and ``open_s``, how long the opening took;
- ``killed``: the same, after a writer killed in the middle of a commit:
  every stream's last segment has a torn tail (bytes past its last
  indexed batch) that the log must cut off before it appends.

``--contend`` runs a thread doing pure-Python work during the commits, as
the bridge's event loop does while the log's I/O thread commits: Python
work on the I/O thread then waits for the GIL.

``--baseline PATH`` runs the same rounds against the ``aqueduct`` package
of another checkout (e.g. ``/work/main``), alternating with this one round
by round, each round in a fresh process, so both meet the same machine:
the report gives both medians and their ratio. ``--profile DIR`` writes a
cProfile of the log's I/O thread per scenario (this checkout only) and
prints its top functions. Progress on stderr; ``--json`` writes the summary.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SCENARIOS = ("steady", "restart", "killed")
TORN_TAIL = b"\x00" * 64  # what a killed commit leaves after a segment's last indexed batch


def _use_checkout(path: str) -> None:
    """Import ``aqueduct`` from ``path`` rather than the installed (editable) package."""
    sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("__editable__")]
    sys.path.insert(0, path)


class _Contender:
    """A thread doing pure-Python work until stopped: the bridge's loop, as far as the GIL can tell."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)

    def _spin(self) -> None:
        while not self._stop.is_set():
            sum(i * i for i in range(1000))

    def __enter__(self) -> _Contender:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def one_round(args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    """Every scenario once, in this process; seconds per scenario (the worker's job)."""
    from aqueduct.bridge.storage.log import DurableLog
    from aqueduct.connector.batch import MessageBatch

    path = workdir / "log"
    payloads = [b"x" * args.size] * args.records
    times = [None] * args.records
    next_id = 0
    profiles: dict[str, cProfile.Profile] = {}

    def fill(log: DurableLog) -> None:
        nonlocal next_id
        for sid in range(args.streams):
            log.append(MessageBatch.run(sid, next_id, payloads, times))
        next_id += args.records

    def timed_commit(log: DurableLog, scenario: str) -> float:
        fill(log)
        prof = profiles.setdefault(scenario, cProfile.Profile()) if args.profile else None
        if prof is not None:  # the commit runs on the log's I/O thread: profile that thread
            log._io.submit(prof.enable).result()
        start = time.perf_counter()
        log.commit()
        took = time.perf_counter() - start
        if prof is not None:
            log._io.submit(prof.disable).result()
        return took

    result: dict[str, float] = {}
    log = DurableLog(path)
    for sid in range(args.streams):
        log.open_stream(sid, f"storm-{sid}", f"producer-{sid}").result()
    fill(log)
    log.commit()  # every stream has a segment and an entry: the fleet before the storm
    steady = []
    with _Contender() if args.contend else _nothing():
        for _ in range(args.commits):
            steady.append(timed_commit(log, "steady"))
    result["steady"] = statistics.median(steady)
    for scenario, opening in (("restart", "restart_open"), ("killed", "killed_open")):
        log.close()
        if scenario == "killed":
            for d in (path / "streams").iterdir():
                last = max(d.glob("*.arrow"))
                with open(last, "ab") as f:
                    f.write(TORN_TAIL)
        start = time.perf_counter()
        log = DurableLog(path)
        result[opening] = time.perf_counter() - start
        with _Contender() if args.contend else _nothing():
            result[scenario] = timed_commit(log, scenario)
    log.close()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        for scenario, prof in profiles.items():
            prof.dump_stats(args.profile / f"group_commit_{scenario}.prof")
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.profile_top)
            print(f"--- I/O thread, {scenario} ({len(steady) if scenario == 'steady' else 1} commits) ---", file=sys.stderr)
            print(out.getvalue(), file=sys.stderr)
    return result


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _worker_argv(args: argparse.Namespace, checkout: str | None, workdir: Path) -> list[str]:
    argv = [
        sys.executable, "-m", "bench.group_commit", "--worker", str(workdir),
        "--streams", str(args.streams), "--records", str(args.records), "--size", str(args.size),
        "--commits", str(args.commits),
    ]  # fmt: skip
    if args.contend:
        argv.append("--contend")
    if checkout:
        argv += ["--checkout", checkout]
    if args.profile and not checkout:
        argv += ["--profile", str(args.profile), "--profile-top", str(args.profile_top)]
    return argv


def run_round(args: argparse.Namespace, checkout: str | None) -> dict[str, float]:
    """One round in a fresh process, on a fresh log under ``--dir``."""
    with tempfile.TemporaryDirectory(prefix="aqueduct-group-commit-", dir=args.dir) as tmp:
        argv = _worker_argv(args, checkout, Path(tmp))
        done = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent.parent)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0].strip("`: "))
    ap.add_argument("--streams", type=int, default=2000, help="streams, each touched by every commit")
    ap.add_argument("--records", type=int, default=3, help="records per stream and commit")
    ap.add_argument("--size", type=int, default=40, help="payload bytes")
    ap.add_argument("--commits", type=int, default=5, help="steady commits per round (their median counts)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds (medians over them)")
    ap.add_argument("--contend", action="store_true", help="a Python thread competes for the GIL during commits")
    ap.add_argument("--baseline", metavar="CHECKOUT", help="compare with the aqueduct package of this checkout")
    ap.add_argument("--dir", type=Path, help="where the logs go (default: the system's temporary directory)")
    ap.add_argument("--profile", type=Path, metavar="DIR", help="cProfile the log's I/O thread, one file per scenario")
    ap.add_argument("--profile-top", type=int, default=25, help="functions printed per profile")
    ap.add_argument("--json", type=Path, help="write the summary here")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--checkout", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        if args.checkout:
            _use_checkout(args.checkout)
        print(json.dumps(one_round(args, args.worker)))
        return 0
    contenders = {"this": None, **({"baseline": args.baseline} if args.baseline else {})}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
    for r in range(args.repeat):
        order = list(contenders.items())[:: 1 if r % 2 else -1]  # who goes first alternates
        for name, checkout in order:
            rounds[name].append(run_round(args, checkout))
            if args.profile:
                args.profile = None  # one profile is enough, and it slows the round it is in
        print(f"round {r + 1}/{args.repeat}: " + "; ".join(
            f"{name} " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in rounds[name][-1].items()) for name in contenders
        ), file=sys.stderr)  # fmt: skip
    medians = {
        name: {k: statistics.median(rd[k] for rd in rs) for k in rs[0]} for name, rs in rounds.items()
    }
    summary: dict[str, Any] = {
        "median_s": medians,
        "rounds": rounds,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("json", "worker", "checkout")},
        "load_average": os.getloadavg(),
    }
    if args.baseline:
        summary["ratio_this_to_baseline"] = {k: medians["this"][k] / medians["baseline"][k] for k in medians["this"]}
    for name, med in medians.items():
        print(f"{name:8s} " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in med.items()))
    if args.baseline:
        print("ratio    " + ", ".join(f"{k} x{v:.2f}" for k, v in summary["ratio_this_to_baseline"].items()))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
