"""``python -m bench.run`` keeps working: one tiny benchmark, real processes, no speed checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from interop.netns import isolated_loopback
from tests.conftest import PICOQUIC_SERVER_OUTSIDE_NAMESPACE, picoquic_missing

ROOT = Path(__file__).resolve().parents[2]


def run_bench(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", *args, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def test_small_message_benchmark_runs_ours_and_baseline_and_reports_a_ratio(tmp_path):
    proc, doc = run_bench(tmp_path, "--only", "ordered_small", "--repeat", "1", "--seconds", "0.3")
    [row] = doc["benchmarks"]
    assert row["name"] == "ordered_small"
    # The fastest raw stack beside it (picoquic) runs only in a loopback-only
    # namespace; elsewhere it says so, and ours and the baseline still run.
    for label, error in row["errors"].items():
        assert label == "raw picoquic, length-prefixed, 1 stream"
        assert "interop.netns" in error or "aiopquic" in error or "pending" in error
    # Both contenders ran once and something arrived after the warm-up.
    assert len(row["ours"]["values"]) == len(row["baseline"]["values"]) == 1
    assert row["ours"]["median"] > 0 and row["baseline"]["median"] > 0
    # The third raw stack (qh3, aioquic's Rust-core fork) ran beside them.
    [qh3] = [o for o in row["others"] if o["label"] == "raw qh3, length-prefixed, 1 stream"]
    assert qh3["median"] > 0
    assert row["ratio"] == row["ours"]["median"] / row["baseline"]["median"]
    assert row["status"] in ("pass", "miss")
    # The table names the benchmark, its target and the machine.
    assert "ordered_small" in proc.stdout and ">=0.80" in proc.stdout
    # Each side's CPU per message, for both contenders, next to the rates.
    cpu = row["cpu_us_per_message"]
    assert all(cpu[who][side] > 0 for who in ("ours", "baseline") for side in ("server", "client"))
    assert "CPU us/msg, receiver + sender" in proc.stdout
    assert doc["machine"]["nproc"] >= 1 and doc["machine"]["aioquic"]


@pytest.mark.picoquic_server
def test_picoquic_benchmark_runs_both_ends_on_picoquic_beside_both_raw_stacks(tmp_path):
    if why := picoquic_missing():
        pytest.skip(why)
    if not isolated_loopback():
        pytest.skip(PICOQUIC_SERVER_OUTSIDE_NAMESPACE)
    proc, doc = run_bench(tmp_path, "--only", "pq_ordered_small", "--repeat", "1", "--seconds", "0.3")
    [row] = doc["benchmarks"]
    assert row["errors"] == {}
    assert row["ours"]["median"] > 0 and row["baseline"]["median"] > 0
    [aioquic] = row["others"]
    assert aioquic["label"] == "raw aioquic, length-prefixed, 1 stream" and aioquic["median"] > 0
    assert row["status"] in ("pass", "miss") and "500,000 msg/s" in proc.stdout


def _marked(marker: str) -> list[psutil.Process]:
    """Processes that inherited our marker variable (the run's workers, had they survived)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("AQUEDUCT_BENCH_SMOKE") == marker:
                found.append(p)
        except psutil.Error:
            continue
    return found


def test_bench_leaves_no_worker_processes_behind(tmp_path):
    marker = uuid.uuid4().hex
    _, doc = run_bench(
        tmp_path,
        "--only",
        "unreliable_small",
        "--repeat",
        "1",
        "--seconds",
        "0.2",
        env={"AQUEDUCT_BENCH_SMOKE": marker},
    )
    [row] = doc["benchmarks"]
    assert row["baseline"]["median"] > 0  # the datagram baseline counted arrivals
    # So did qh3's, and its sender ended with the run (its worker is checked below too).
    [qh3] = [o for o in row["others"] if o["label"] == "raw qh3 datagrams"]
    assert qh3["median"] > 0
    # Our sender says how often the window held it back and what it evicted; an evicted
    # message never arrived, so what arrived and what was evicted fit in what was sent.
    [ours] = row["runs"]["aqueduct UNRELIABLE"]
    assert isinstance(ours["window_stalls"], int) and isinstance(ours["evicted"], int)
    assert ours["messages"] > 0 and ours["messages"] + ours["warmup_messages"] + ours["evicted"] <= ours["sent"]
    assert _marked(marker) == []


def run_module(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_spark_overhead_script_explains_itself():
    proc = run_module("bench.spark_overhead", "--help")
    assert proc.returncode == 0
    assert "--rates" in proc.stdout and "--json" in proc.stdout


def test_unknown_benchmark_name_is_refused_with_the_known_names(tmp_path):
    proc = run_module("bench.run", "--only", "nope")
    assert proc.returncode == 2
    assert "unknown benchmark(s): nope" in proc.stderr and "ordered_small" in proc.stderr


@pytest.mark.slow
@pytest.mark.spark
def test_latency_benchmark_quick_mode_reports_ours_beside_sparks_floor(tmp_path):
    out = tmp_path / "latency.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.latency", "--quick", "--rates", "200", "--seconds", "0.5",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    [row] = doc["rates"]
    assert row["rate"] == 200 and row["ours"]["acked"] == row["ours"]["sent"] > 0
    assert row["ours"]["p50_ms"] > 0 and row["floor"]["batches"] > 0 and row["p50_ratio"] > 0
    assert doc["first_ack_s"] > 0 and row["budget"]["records"] > 0
    assert set(row["jit_ms_per_s"]) == {"ours", "floor"}  # what each side paid for the JVM's compiling
    assert "Spark rate-source micro-batch" in proc.stdout and "waiting for a trigger" in proc.stdout


def test_flight_read_bench_reads_the_same_rows_both_ways_and_reports_the_ratio(tmp_path):
    from bench.flight_read import main

    out = tmp_path / "flight.json"
    assert main(["--records", "2000", "--size", "32", "--epoch", "100", "--repeat", "1", "--json", str(out)]) == 0
    row = json.loads(out.read_text())
    assert row["records"] == 2000 and row["ratio"] > 0
    assert set(row["bare_flight"]) == {"tls", "tls_2_streams", "tls_small_batches", "plaintext"}
    assert all(way["mb_s"] > 0 for way in row["bare_flight"].values())


def test_bridges_scaleout_script_explains_itself():
    proc = run_module("bench.bridges_scaleout", "--help")
    assert proc.returncode == 0
    assert "--quick" in proc.stdout and "--json" in proc.stdout


def test_failover_bench_explains_itself():
    proc = run_module("bench.failover", "--help")
    assert proc.returncode == 0
    assert "--quick" in proc.stdout and "--json" in proc.stdout


def test_packets_per_record_bench_counts_each_sides_frames(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.packets_per_record", "--producers", "2", "--records", "3", "--rate", "20", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["records"] == 6
    for side in ("client", "server"):  # every record goes in a STREAM frame one way, its ACK the other
        assert doc["by_type"][side]["STREAM"] > 0 and doc["frames_per_record"][side] > 0
        assert 0 < doc["datagrams_per_record"][side] <= doc["frames_per_record"][side]  # a frame or more in each
