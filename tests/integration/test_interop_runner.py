"""The interop runner runs the matrix, reports per cell, and never leaves processes behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from interop.run import Implementation, RunResult, render_matrix

FAKE_ENDPOINT = """
import os, subprocess, sys, time
args = sys.argv[1:]
role = args[args.index("--role") + 1]
log = args[args.index("--log") + 1]
mode = os.environ.get("FAKE_MODE", "unsupported")
if mode == "unsupported":
    sys.exit(127)
with open(os.path.join(log, role + ".pid"), "w") as f:
    f.write(str(os.getpid()))
if mode == "hang":
    print("listening", flush=True)
    time.sleep(120)
if role == "server":
    # A stuck server with a child of its own: the runner must kill both.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(os.path.join(log, "child.pid"), "w") as f:
        f.write(str(child.pid))
    print("listening", flush=True)
    time.sleep(120)
sys.exit(1)
"""


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "interop.run", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_implementation_names_and_commands() -> None:
    assert Implementation.parse("rust=/opt/aq/endpoint --verbose") == Implementation(
        "rust", ("/opt/aq/endpoint", "--verbose")
    )
    assert Implementation.parse("/opt/aq/endpoint").name == "endpoint"
    assert Implementation.parse("python -m x --flag=1").command == ("python", "-m", "x", "--flag=1")


def test_matrix_has_one_table_per_pair_with_scenarios_across() -> None:
    def cell(server: str, case: str, scen: str, status: str) -> RunResult:
        return RunResult(server, "py", case, scen, status, 0, 0, 1.0, 1, "/tmp/x")

    md = render_matrix([
        cell("py", "ordered", "clean", "passed"), cell("py", "ordered", "loss", "failed"),
        cell("rust", "ordered", "clean", "unsupported"), cell("rust", "ordered", "loss", "passed"),
    ])
    assert "## server `py`, client `py`" in md and "## server `rust`, client `py`" in md
    assert "| test case | clean | loss |" in md
    assert "| ordered | ✓ | ✗ |" in md and "| ordered | – | ✓ |" in md
    assert "2 passed, 1 failed, 1 unsupported." in md


def test_unknown_test_case_is_refused() -> None:
    result = _run(["--testcases", "teleport"])
    assert result.returncode == 2 and "unknown test case: teleport" in result.stderr


def test_plugged_in_implementation_unsupported_cases(tmp_path: Path) -> None:
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE_ENDPOINT)
    cmd = f"fake={sys.executable} {fake}"
    out = tmp_path / "out"
    result = _run(["--server", cmd, "--client", cmd, "--testcases", "ordered,close",
                   "--scenarios", "clean", "--out", str(out), "--json"])
    assert result.returncode == 0, result.stderr
    rows = json.loads((out / "results.json").read_text())
    assert [(r["testcase"], r["status"]) for r in rows] == [("ordered", "unsupported"), ("close", "unsupported")]
    assert "| ordered | – |" in (out / "matrix.md").read_text()


def test_failed_run_kills_the_stuck_peer_and_its_children(tmp_path: Path) -> None:
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE_ENDPOINT)
    cmd = f"fake={sys.executable} {fake}"
    out = tmp_path / "out"
    result = _run(["--server", cmd, "--client", cmd, "--testcases", "ordered", "--scenarios", "clean",
                   "--out", str(out), "--json"], env={"FAKE_MODE": "fail"})
    assert result.returncode == 1
    (row,) = json.loads(result.stdout)
    assert row["status"] == "failed" and row["client_exit"] == 1
    child = int((Path(row["log_dir"]) / "child.pid").read_text())
    assert not _alive(child)


def test_smoke_our_endpoint_handshake_on_clean_network(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _run(["--testcases", "handshake", "--scenarios", "clean", "--out", str(out)])
    assert result.returncode == 0, result.stdout + result.stderr
    (row,) = json.loads((out / "results.json").read_text())
    assert (row["testcase"], row["status"]) == ("handshake", "passed")
    assert "| handshake | ✓ |" in result.stdout
    log_dir = Path(row["log_dir"])
    assert (log_dir / "proxy.jsonl").stat().st_size > 0
    for role in ("server", "client"):
        assert "PASSED handshake" in (log_dir / f"{role}.log").read_text()
        assert (log_dir / f"{role}-frames.jsonl").stat().st_size > 0


def test_sigterm_stops_the_runner_and_every_endpoint(tmp_path: Path) -> None:
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE_ENDPOINT)
    cmd = f"fake={sys.executable} {fake}"
    out = tmp_path / "out"
    runner = subprocess.Popen(
        [sys.executable, "-m", "interop.run", "--server", cmd, "--client", cmd,
         "--testcases", "ordered", "--scenarios", "clean", "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "FAKE_MODE": "hang"},
    )
    run_dir = out / "runs" / "fake_fake" / "clean" / "ordered"
    pid_files = [run_dir / "server.pid", run_dir / "client.pid"]
    try:
        for _ in range(300):  # bounded wait for both endpoints to be up
            if all(p.exists() and p.read_text() for p in pid_files):
                break
            time.sleep(0.05)
        runner.terminate()
        _, err = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert runner.returncode == 130 and "interrupted after 0 runs" in err
    assert all(not _alive(int(p.read_text())) for p in pid_files)
    assert (out / "results.json").read_text().strip() == "[]"
