"""Run one benchmark: every contender, interleaved, several times; summarize and judge."""

from __future__ import annotations

import importlib
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.benchmarks import Benchmark, Case
from bench.common import sending_bound
from bench.harness import BenchError, WorkerPair
from bench.stats import Summary, ratio
from bench.worker import ROLES


@dataclass(frozen=True)
class Settings:
    """How long and how often: ``seconds`` of sending per run, the first ``warmup`` not counted."""

    seconds: float
    warmup: float
    repeat: int
    idle: float = 5.0

    @classmethod
    def full(cls, repeat: int | None = None) -> Settings:
        return cls(seconds=2.5, warmup=0.5, repeat=repeat or 5)

    @classmethod
    def quick(cls, repeat: int | None = None) -> Settings:
        return cls(seconds=1.0, warmup=0.25, repeat=repeat or 2)

    def params(self, case: Case, repeat: int) -> dict[str, Any]:
        """Role parameters; a case's ``min_seconds``/``min_warmup`` lengthen coarse-grained runs."""
        extra = dict(case.params)
        seconds = max(self.seconds, extra.pop("min_seconds", 0.0))
        warmup = max(self.warmup, extra.pop("min_warmup", 0.0))
        params = {
            "seconds": seconds,
            "warmup": warmup,
            "idle": self.idle,
            "limit": seconds + 5.0,  # the receiver stops draining a slow path here
            **extra,
        }
        if case.phased:
            params["phases"] = repeat
        return params

    def timeout(self, case: Case, repeat: int) -> float:
        """Bound on one client/server run: sending, draining, and Spark's start for Spark cases."""
        p = self.params(case, repeat)
        return sending_bound(p) + 2 * p.get("prime_timeout", 0.0) + 120.0


def role_missing(role: str) -> str | None:
    """Why the module behind a role cannot be imported ("pending"), or None when it can.

    A role whose stack is an optional extra (picoquic, qh3) names the
    missing module, so the row says what to install.
    """
    try:
        importlib.import_module(ROLES[role])
    except ImportError as exc:
        return f"pending: not importable ({exc})"
    return None


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _values(case: Case, result: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-repetition result dicts in one run's result (several for a phased case)."""
    side = result[case.side]
    if not case.phased:
        return [side]
    common = {k: v for k, v in side.items() if k != "phases"}
    return [{**phase, **common} for phase in side["phases"]]


def run_benchmark(
    bench: Benchmark, settings: Settings, certs: Path, profile_dir: Path | None = None
) -> dict[str, Any]:
    """Measure every case of ``bench``; the result row as a dict (see :func:`judge`)."""
    repeat = min(settings.repeat, bench.max_repeat or settings.repeat)
    runs: dict[str, list[dict[str, Any]]] = {c.label: [] for c in bench.cases}
    errors: dict[str, str] = {}
    for c in bench.cases:
        if (missing := role_missing(c.role)) is not None:
            errors[c.label] = missing
    with WorkerPair(certs) as pair:
        for rep in range(repeat):
            for case in bench.cases:
                if case.label in errors or (case.phased and rep > 0):
                    continue
                try:
                    result = pair.run(
                        case.role,
                        settings.params(case, repeat),
                        settings.timeout(case, repeat),
                        profile_dir,
                    )
                except BenchError as exc:
                    errors[case.label] = f"error: {exc}"
                    _log(f"  {bench.name} / {case.label}: {exc}")
                    continue
                for r in _values(case, result):
                    runs[case.label].append({**r, **_context(case, result), **_cpu_per_message(case, result)})
                    _log(f"  {bench.name} rep {len(runs[case.label])}/{repeat} {case.label}: "
                         f"{float(r[case.metric]):,.1f} {bench.unit}")
    return judge(bench, runs, errors)


def _context(case: Case, result: dict[str, Any]) -> dict[str, Any]:
    """Fields of the other side worth keeping next to a case's numbers (Spark/memory facts)."""
    other = result["server" if case.side == "client" else "client"]
    keep = (
        "first_batch_s", "sink_rows", "sink_distinct", "batches", "durable_records", "ended", "sent",
        "window_stalls", "evicted", "packets",
    )
    return {k: other[k] for k in keep if k in other}


def _cpu_per_message(case: Case, result: dict[str, Any]) -> dict[str, float]:
    """Each side's CPU microseconds per message that arrived (whole run, warm-up included).

    A rate on a shared machine swings with the load; CPU time per message
    swings far less, so it shows where a gap comes from (which side, how
    much) even when the rates are noisy. Phased (Spark) runs share one
    process run between phases and are left out.
    """
    if case.phased:
        return {}
    rx = result[case.side]
    n = rx.get("messages", 0) + rx.get("warmup_messages", 0)
    if not n:
        return {}
    return {f"{side}_cpu_us": result[side]["cpu_s"] / n * 1e6 for side in ("server", "client") if "cpu_s" in result[side]}


def _cpu_medians(case_runs: list[dict[str, Any]]) -> dict[str, float]:
    out = {}
    for side in ("server", "client"):
        values = [r[f"{side}_cpu_us"] for r in case_runs if f"{side}_cpu_us" in r]
        if values:
            out[side] = statistics.median(values)
    return out


def _target_text(bench: Benchmark) -> str | None:
    """The target column when it is not a plain ratio: a verdict field, or a rate floor."""
    if bench.verdict:
        return bench.verdict
    if bench.floor is not None:
        rate = f"{bench.floor:,.0f} {bench.unit}"
        return rate if bench.target is None else f"{bench.target:.2f} and {rate}"
    return None


def judge(bench: Benchmark, runs: dict[str, list[dict[str, Any]]], errors: dict[str, str]) -> dict[str, Any]:
    """The row: summaries, ratio ours/baseline, extras and the verdict.

    Verdicts: ``pass``/``miss`` against the target; ``info`` when DESIGN.md
    sets none; ``pending`` when our layer is not there yet; ``error`` when a
    run failed.
    """

    def summary(case: Case) -> Summary:
        return Summary(tuple(float(r[case.metric]) for r in runs[case.label]))

    ours = summary(bench.ours)
    base = summary(bench.baseline) if bench.baseline is not None else Summary(())
    main_ratio = ratio(ours, base) if ours.values and base.values else None
    our_runs = runs[bench.ours.label]
    if bench.ours.label in errors:
        status = "pending" if errors[bench.ours.label].startswith("pending") else "error"
    elif bench.verdict is not None:
        verdicts = [r.get(bench.verdict) for r in our_runs]
        status = "pass" if verdicts and all(verdicts) else ("miss" if verdicts else "error")
    elif bench.target is not None and main_ratio is None:
        status = "error"
    elif bench.target is None and bench.floor is None:
        status = "info" if main_ratio is not None else "error"
    else:
        met = (bench.target is None or main_ratio >= bench.target) and (
            bench.floor is None or (bool(ours.values) and ours.median >= bench.floor)
        )
        status = "pass" if met else "miss"
    extras = {}
    for label, key in bench.extras:
        values = [float(r[key]) for r in our_runs if r.get(key) is not None]
        if values:
            extras[label] = statistics.median(values)
    return {
        "name": bench.name,
        "title": bench.title,
        "unit": bench.unit,
        "target": bench.target,
        "target_text": _target_text(bench),
        "status": status,
        "ratio": main_ratio,
        "ours": {"label": bench.ours.label, **ours.as_dict()},
        "baseline": {"label": bench.baseline.label if bench.baseline else None, **base.as_dict()},
        "others": [
            {
                "label": c.label,
                **summary(c).as_dict(),
                "ours_ratio": ratio(ours, summary(c)) if ours.values and summary(c).values else None,
            }
            for c in bench.others
        ],
        "extra": extras,
        "cpu_us_per_message": {
            "ours": _cpu_medians(our_runs),
            "baseline": _cpu_medians(runs[bench.baseline.label]) if bench.baseline is not None else {},
        },
        "runs": runs,
        "errors": errors,
    }
