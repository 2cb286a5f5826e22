"""The machine description and the results table (text for people, JSON for tools)."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Any


def machine() -> dict[str, Any]:
    """Cores, CPU model, OS, Python and key package versions: numbers mean nothing without them."""
    model = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = {}
    for dist in ("aioquic", "cryptography", "pyarrow", "pyspark"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "nproc": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": model,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        **versions,
    }


def _num(x: float) -> str:
    if x >= 1000:
        return f"{x:,.0f}"
    if x >= 100:
        return f"{x:.0f}"
    return f"{x:.2f}"


def _cell(summary: dict[str, Any]) -> str:
    if not summary["values"]:
        return "-"
    return f"{_num(summary['median'])} ±{summary['spread'] * 100:.0f}%"


def _cpu_cells(row: dict[str, Any]) -> tuple[str, str, str] | None:
    """("ours rx + tx", "baseline rx + tx", "baseline total / ours total") for a row with both.

    The last cell reads like the ratio column: 1.00 means our path costs the
    CPU of the baseline per message, 0.50 twice as much.
    """
    cpu = row.get("cpu_us_per_message") or {}
    ours, base = cpu.get("ours") or {}, cpu.get("baseline") or {}
    if not all(s in ours and s in base for s in ("server", "client")):
        return None

    def cell(d: dict[str, float]) -> str:  # the server process receives in every such benchmark
        return f"{_num(d['server'])} + {_num(d['client'])}"

    return cell(ours), cell(base), f"{(base['server'] + base['client']) / (ours['server'] + ours['client']):.2f}"


def table(rows: list[dict[str, Any]]) -> str:
    """One line per benchmark (median ± spread over repetitions), indented lines for extras."""
    header = ("benchmark", "unit", "ours", "baseline", "ratio", "target", "result")
    lines: list[tuple[str, ...]] = [header]
    notes: list[str] = []
    for row in rows:
        r = row["ratio"]
        lines.append(
            (
                row["name"],
                row["unit"],
                "pending" if row["status"] == "pending" else _cell(row["ours"]),
                _cell(row["baseline"]),
                f"{r:.2f}" if r is not None else "-",
                row.get("target_text") or (f">={row['target']:.2f}" if row.get("target") is not None else "-"),
                row["status"].upper() if row["status"] in ("pass", "miss") else row["status"],
            )
        )
        for other in row.get("others", []):
            o = other["ours_ratio"]
            lines.append(
                (f"  vs {other['label']}", "", "", _cell(other), f"{o:.2f}" if o is not None else "-", "", "")
            )
        for key, value in row.get("extra", {}).items():
            lines.append((f"  {key}", "", _num(value), "", "", "", ""))
        cpu = _cpu_cells(row)
        if cpu is not None:
            lines.append(("  CPU us/msg, receiver + sender", "", cpu[0], cpu[1], cpu[2], "", ""))
        for label, err in row.get("errors", {}).items():
            notes.append(f"{row['name']} / {label}: {err.splitlines()[0]}")
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    if notes:
        out += ["", *notes]
    return "\n".join(out)


def markdown(doc: dict[str, Any]) -> str:
    """The results of a ``--json`` file as a Markdown table (for docs/performance.md)."""
    lines = [
        "| benchmark | unit | ours (median ± spread) | baseline (median ± spread) | ratio | target | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in doc["benchmarks"]:
        r = row["ratio"]
        target = row.get("target_text") or (f">= {row['target']:.2f}" if row.get("target") is not None else "-")
        ours = "pending" if row["status"] == "pending" else _cell(row["ours"])
        lines.append(
            f"| `{row['name']}` | {row['unit']} | {ours} | {_cell(row['baseline'])} | "
            f"{f'{r:.2f}' if r is not None else '-'} | {target} | {row['status'].upper()} |"
        )
        for other in row.get("others", []):
            o = other["ours_ratio"]
            lines.append(
                f"| &nbsp;&nbsp;vs {other['label']} | | | {_cell(other)} | "
                f"{f'{o:.2f}' if o is not None else '-'} | | |"
            )
        for key, value in row.get("extra", {}).items():
            lines.append(f"| &nbsp;&nbsp;{key} | | {_num(value)} | | | | |")
        cpu = _cpu_cells(row)
        if cpu is not None:
            lines.append(f"| &nbsp;&nbsp;CPU µs/msg, receiver + sender | | {cpu[0]} | {cpu[1]} | {cpu[2]} | | |")
    m = doc["machine"]
    lines += [
        "",
        f"{len(doc['benchmarks'])} benchmarks in {doc['elapsed_seconds']:.0f} s, "
        f"{doc['settings']['repeat']} repetitions x {doc['settings']['seconds']:g} s; "
        f"load average {m['loadavg'][0]:.1f} before, {m.get('loadavg_after', [0])[0]:.1f} after.",
    ]
    for row in doc["benchmarks"]:
        for label, err in row.get("errors", {}).items():
            lines.append(f"- `{row['name']}` / {label}: {err.splitlines()[0]}")
    return "\n".join(lines)


if __name__ == "__main__":
    import json

    with open(sys.argv[1], encoding="utf-8") as f:
        print(markdown(json.load(f)))
