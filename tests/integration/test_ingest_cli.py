"""``aqueduct-bridge`` as a user runs it: help, argument errors, ``status`` on a real log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aqueduct.bridge.source.datasource import AqueductStreamReader, SourceOptions
from aqueduct.bridge.storage.acked import write_acked
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.frames import ConnectorMessage


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("aqueduct-bridge")
    program = [str(script)] if script.exists() else [sys.executable, "-m", "aqueduct.bridge.app.cli"]
    return subprocess.run([*program, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("command", "mentions"),
    [
        ((), ["serve", "status", "consumers"]),
        (("serve",), ["--quic", "--tcp", "--wallaroo-tcp", "--log", "--cookie", "--cert", "--master", "--sink",
                      "--output", "--checkpoint", "--max-records-per-trigger", "--trigger-interval", "--idle-wait",
                      "--max-lag", "--credit-budget", "--pipeline", "--query-name", "--segment-bytes",
                      "--max-consumer-lag", "--spark-start-timeout"]),
        (("status",), ["--log", "--json"]),
        (("consumers",), ["list", "drop"]),
        (("consumers", "list"), ["--log", "--json"]),
        (("consumers", "drop"), ["--log", "name"]),
    ],
)  # fmt: skip
def test_every_command_explains_itself(command: tuple[str, ...], mentions: list[str]) -> None:
    done = run_cli(*command, "--help")
    assert done.returncode == 0, done.stderr
    for word in mentions:
        assert word in done.stdout


def test_the_demo_explains_itself_and_is_not_a_product_command() -> None:
    """``make demo`` runs ``python -m demo``; the product CLI ships no demo code."""
    demo = subprocess.run(
        [sys.executable, "-m", "demo", "--help"], capture_output=True, text=True, timeout=120
    )
    assert demo.returncode == 0, demo.stderr
    for word in ["--producers", "--events", "--streams", "--json", "--keep"]:
        assert word in demo.stdout
    assert run_cli("demo", "--help").returncode == 2


def test_serve_without_a_listener_says_what_is_missing(tmp_path: Path) -> None:
    done = run_cli("serve", "--log", str(tmp_path / "log"))
    assert done.returncode == 2
    assert "give --quic, --tcp and/or --wallaroo-tcp HOST:PORT" in done.stderr


def test_serve_rejects_a_malformed_address(tmp_path: Path) -> None:
    done = run_cli("serve", "--log", str(tmp_path / "log"), "--tcp", "localhost")
    assert done.returncode == 2
    assert "expected HOST:PORT, got 'localhost'" in done.stderr


@pytest.mark.parametrize("option", ["--credit-budget", "--memory-budget"])
def test_serve_rejects_a_budget_that_is_not_positive(tmp_path: Path, option: str) -> None:
    done = run_cli("serve", "--log", str(tmp_path / "log"), "--tcp", "127.0.0.1:0", option, "0")
    assert done.returncode == 2
    assert f"argument {option}: must be a positive integer, got 0" in done.stderr


def test_status_of_a_missing_log_is_a_clear_error(tmp_path: Path) -> None:
    done = run_cli("status", "--log", str(tmp_path / "nothing"))
    assert done.returncode == 2
    assert "no log directory at" in done.stderr


def test_status_shows_positions_lag_and_acked_points(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    with DurableLog(log_dir) as log:
        log.open_stream(3, "orders", "shop/a")
        for i in range(10):
            log.append(ConnectorMessage.build(3, b"x", message_id=100 + i))
        log.append(ConnectorMessage.build(3, message_id=110, boundary=True))
        log.open_stream(4, "clicks", "shop/b")
        log.append(ConnectorMessage.build(4, b"y", message_id=0))
        log.commit()
    # What the Spark source records after committing a micro-batch that ended at offset 5.
    AqueductStreamReader(SourceOptions(str(log_dir))).commit({"3": 5})

    done = run_cli("status", "--log", str(log_dir), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    by_id = {s["stream_id"]: s for s in report["streams"]}
    assert by_id[3] == {
        "stream_id": 3,
        "stream_name": "orders",
        "connector": "shop/a",
        "earliest": 0,
        "head": 11,
        "complete": 11,
        "committed": 5,
        "lag": 6,
        "durable_reference": 111,
        "acked_reference": 105,
    }
    assert by_id[4]["committed"] == 0 and by_id[4]["acked_reference"] == 0
    assert report["total_lag"] == 6 + by_id[4]["lag"]

    # The live bridge records what its listener saw committed: one batch ahead of the reader.
    write_acked(log_dir, {3: 11, 4: 0})
    report = json.loads(run_cli("status", "--log", str(log_dir), "--json").stdout)
    assert report["streams"][0] == by_id[3] | {"committed": 11, "lag": 0, "acked_reference": 111}

    table = run_cli("status", "--log", str(log_dir))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["STREAM", "NAME", "CONNECTOR"]
    assert lines[1].split()[:3] == ["3", "orders", "shop/a"]
    assert lines[-1].startswith("2 streams, 12 records, lag 1")


def test_a_second_bridge_on_the_same_log_is_refused_naming_the_first(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log"):  # the running bridge holds the writer lock
        before = sorted(p.name for p in (tmp_path / "log").iterdir())
        done = run_cli("serve", "--tcp", "127.0.0.1:0", "--log", str(tmp_path / "log"))
        assert sorted(p.name for p in (tmp_path / "log").iterdir()) == before  # nothing created (no tls/)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"aqueduct-bridge serve: --log {tmp_path / 'log'}: held by process {os.getpid()}, its one writer; "
        "stop that one first, or give another log directory"
    ]


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("no_colon", "--pipeline 'no_colon': expected MODULE:FUNCTION, e.g. my_job:build"),
        ("aq_missing_module:build", "--pipeline aq_missing_module:build: cannot import 'aq_missing_module'"),
        ("aq_user_job:nothing", "--pipeline aq_user_job:nothing: aq_user_job has no function 'nothing'"),
        ("aq_broken_job:build", "cannot import 'aq_broken_job': NameError"),
    ],
)
def test_serve_names_a_pipeline_it_cannot_load_before_starting_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str, error: str
) -> None:
    (tmp_path / "aq_user_job.py").write_text("def build(df):\n    return df.writeStream\n")
    (tmp_path / "aq_broken_job.py").write_text("undefined_name\n")
    monkeypatch.chdir(tmp_path)  # the user's module sits in the working directory
    done = run_cli("serve", "--tcp", "127.0.0.1:0", "--log", str(tmp_path / "log"), "--pipeline", spec)
    assert done.returncode == 2
    assert error in done.stderr
    assert not (tmp_path / "log").exists()  # refused before anything was created


def test_a_spark_start_that_takes_too_long_fails_loudly_instead_of_hanging(tmp_path: Path) -> None:
    env_python = {"PYSPARK_PYTHON": sys.executable}
    script = Path(sys.executable).with_name("aqueduct-bridge")
    done = subprocess.run(
        [str(script), "serve", "--tcp", "127.0.0.1:0", "--log", str(tmp_path / "log"),
         "--output", str(tmp_path / "out"), "--spark-start-timeout", "0.5"],
        capture_output=True, text=True, timeout=120, env=os.environ | env_python,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Spark did not start the query within 0.5 s (--spark-start-timeout)" in done.stderr
    DurableLog(tmp_path / "log").close()  # the log was released: a new bridge can start


def test_consumers_are_listed_with_their_lag_and_a_gone_one_is_dropped(tmp_path: Path) -> None:
    from aqueduct.bridge.storage.commits import commit_file
    from aqueduct.bridge.storage.consumers import register_consumer

    log_dir = tmp_path / "log"
    with DurableLog(log_dir) as log:
        log.open_stream(1, "orders", "shop/a")
        for i in range(10):
            log.append(ConnectorMessage.build(1, b"x", message_id=i))
        log.append(ConnectorMessage.build(1, message_id=10, boundary=True))
        log.commit()
    assert run_cli("consumers", "list", "--log", str(log_dir)).stdout.startswith("no consumers registered")
    register_consumer(log_dir, "spark-job", {}, acks=True)
    register_consumer(log_dir, "audit", {})
    commit_file(log_dir, "spark-job").parent.mkdir()
    commit_file(log_dir, "spark-job").write_text(json.dumps({"offsets": {"1": 11}}))

    listed = json.loads(run_cli("consumers", "list", "--log", str(log_dir), "--json").stdout)
    by_name = {r["name"]: r for r in listed}
    assert (by_name["spark-job"]["acks"], by_name["spark-job"]["lag_records"]) == (True, 0)
    assert by_name["spark-job"]["oldest_unread_age_s"] is None  # nothing unread
    audit = by_name["audit"]
    assert (audit["acks"], audit["lag_records"], audit["state"]) == (False, 11, "live")
    assert audit["worst_stream"]["stream_id"] == 1 and audit["worst_stream"]["records"] == 11
    assert audit["lag_bytes"] == audit["worst_stream"]["bytes"] > 11  # what reading it costs
    assert 0 <= audit["oldest_unread_age_s"] < 600
    status = json.loads(run_cli("status", "--log", str(log_dir), "--json").stdout)
    assert {c["name"]: c["lag_records"] for c in status["consumers"]} == {"audit": 11, "spark-job": 0}
    table = run_cli("consumers", "list", "--log", str(log_dir)).stdout
    assert "CONSUMER" in table and "audit" in table

    done = run_cli("consumers", "drop", "--log", str(log_dir), "audit")
    assert done.returncode == 0, done.stderr
    assert "dropped consumer 'audit'" in done.stdout
    listed = json.loads(run_cli("consumers", "list", "--log", str(log_dir), "--json").stdout)
    assert {r["name"]: r["state"] for r in listed} == {"audit": "dropped", "spark-job": "live"}

    unknown = run_cli("consumers", "drop", "--log", str(log_dir), "nobody")
    assert unknown.returncode == 2
    assert "no consumer named 'nobody'" in unknown.stderr
    not_a_log = run_cli("consumers", "list", "--log", str(tmp_path))
    assert not_a_log.returncode == 2
    assert "is not an aqueduct log" in not_a_log.stderr
