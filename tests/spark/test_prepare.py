"""``aqueduct-bridge prepare``: Spark's class archive written once, before the first ``serve`` needs it.

Real processes: the command as installed, a real ``serve`` under it, a real
Spark JVM writing the archive into a cache of the test's own. The suite's
``PYSPARK_SUBMIT_ARGS`` (which makes every ``serve`` skip the archive) is
left out of these commands' environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from aqueduct.bridge.app.class_archive import class_archive
from aqueduct.bridge.app.spark_home import launch_home

BRIDGE = str(Path(sys.executable).with_name("aqueduct-bridge"))
TIMEOUT = 600  # only turns a hang into a failure


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "AQUEDUCT_CLASS_ARCHIVE", "SPARK_HOME")}
    return {**env, "AQUEDUCT_CACHE_DIR": str(cache)}


def _prepare(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BRIDGE, "prepare", *args], env=_env(cache), capture_output=True, text=True, timeout=TIMEOUT)


def test_prepare_writes_the_archive_serve_maps_and_leaves_it_the_next_time(tmp_path, monkeypatch) -> None:
    cache = tmp_path / "cache"
    first = _prepare(cache, "--json")
    assert first.returncode == 0, first.stderr
    written = json.loads(first.stdout)
    assert written["written"] is True
    archive = Path(written["archive"])
    assert archive.parent == cache and archive.is_file() and written["bytes"] == archive.stat().st_size > 0
    assert "starting Spark once to write its class archive" in first.stderr
    assert not list(cache.glob("*.partial"))  # nothing half-written left

    # A serve started now maps it: the archive it looks for is this one, and there.
    monkeypatch.setenv("AQUEDUCT_CACHE_DIR", str(cache))
    from pyspark.find_spark_home import _find_spark_home

    found = class_archive(launch_home(_find_spark_home(), cache))
    assert found is not None and found.path == archive and not found.writes

    again = _prepare(cache)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"already prepared: serve maps this archive at every start: {archive} (")
    assert "starting Spark" not in again.stderr  # left alone without starting Spark


def test_prepare_that_gets_no_ack_says_why_and_leaves_nothing_running(tmp_path) -> None:
    cache = tmp_path / "cache"
    failed = _prepare(cache, "--timeout", "0.5")  # Spark cannot start in half a second
    assert failed.returncode == 1
    assert "aqueduct-bridge prepare: no record went through serve (no ACK within 0.5 s):" in failed.stderr
    assert not list(cache.glob("*.jsa"))  # no archive claimed
    # The killed serve's Spark JVM (a session of its own) ends once its stdin pipe does.
    psutil.wait_procs(_started_with(cache), timeout=60)
    assert _started_with(cache) == []


def _started_with(cache: Path) -> list[psutil.Process]:
    """The processes whose environment names ``cache``: the ones a prepare run started (its serve, Spark's JVM)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("AQUEDUCT_CACHE_DIR") == str(cache):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.mark.parametrize("setting", [{"AQUEDUCT_CLASS_ARCHIVE": "0"}, {"PYSPARK_SUBMIT_ARGS": "pyspark-shell"}])
def test_prepare_has_nothing_to_do_when_serve_uses_no_archive(tmp_path, setting) -> None:
    cache = tmp_path / "cache"
    done = subprocess.run(
        [BRIDGE, "prepare"], env={**_env(cache), **setting}, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("nothing to prepare: ")
    assert next(iter(setting)) in done.stdout
    assert done.stderr == ""
