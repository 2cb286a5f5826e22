"""Spark's class archive: written once by a JVM that exits cleanly, mapped after, never half-written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aqueduct.bridge.app.class_archive import class_archive, keep_archive, prune

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs java on PATH")


@pytest.fixture
def spark_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AQUEDUCT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("AQUEDUCT_CLASS_ARCHIVE", raising=False)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    (tmp_path / "spark" / "jars").mkdir(parents=True)
    return tmp_path / "spark"


def stand_in_jvm(writes_to: Path | None, status: int = 0) -> subprocess.Popen[bytes]:
    """A process that, like pyspark's gateway JVM, ends when its stdin does (writing ``writes_to`` first)."""
    write = f"open({str(writes_to)!r}, 'wb').write(b'classes')" if writes_to else "pass"
    script = f"import sys; sys.stdin.read(); {write}; sys.exit({status})"
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)


def test_first_run_writes_at_exit_and_later_runs_map(spark_home: Path) -> None:
    first = class_archive(str(spark_home))
    assert first is not None and first.writes
    assert first.java_options()[0] == f"-XX:ArchiveClassesAtExit={first.partial}"

    assert keep_archive(first, stand_in_jvm(first.partial))
    assert first.path.read_bytes() == b"classes" and not first.partial.exists()
    assert json.loads(first.path.with_suffix(".json").read_text())["spark_jars"] == str((spark_home / "jars").resolve())

    later = class_archive(str(spark_home))
    assert later is not None and not later.writes and later.path == first.path
    assert later.java_options()[0] == f"-XX:SharedArchiveFile={first.path}"


@pytest.mark.parametrize("status", [0, 1])
def test_a_jvm_that_fails_or_writes_nothing_leaves_no_archive(spark_home: Path, status: int) -> None:
    archive = class_archive(str(spark_home))
    assert archive is not None
    writes_to = archive.partial if status else None  # status 1: it wrote part of one, then failed
    assert not keep_archive(archive, stand_in_jvm(writes_to, status))
    assert not archive.path.exists() and not archive.partial.exists()
    assert class_archive(str(spark_home)).writes  # type: ignore[union-attr]  # the next start tries again


def test_an_installation_gone_loses_its_archive_and_a_dead_writer_its_partial(spark_home: Path) -> None:
    archive = class_archive(str(spark_home))
    assert archive is not None and keep_archive(archive, stand_in_jvm(archive.partial))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = archive.path.with_name(f"{archive.path.name}.{dead.stdout.strip()}.partial")
    left.write_bytes(b"half")
    running = archive.path.with_name(f"{archive.path.name}.{os.getpid()}.partial")  # this process still writes
    running.write_bytes(b"half")

    prune(archive.path.parent)
    assert archive.path.exists() and running.exists() and not left.exists()

    shutil.rmtree(spark_home / "jars")
    prune(archive.path.parent)
    assert not archive.path.exists() and not archive.path.with_suffix(".json").exists()


def test_a_jvm_that_ended_before_the_stop_is_not_waited_for(spark_home: Path) -> None:
    archive = class_archive(str(spark_home))
    assert archive is not None
    jvm = stand_in_jvm(archive.partial, status=143)  # e.g. SIGTERM'd with the bridge's unit
    jvm.stdin.close()  # type: ignore[union-attr]
    jvm.wait()
    assert not keep_archive(archive, jvm)
    assert not archive.path.exists() and not archive.partial.exists()


def test_one_writer_at_a_time(spark_home: Path) -> None:
    writer = class_archive(str(spark_home))
    assert writer is not None and writer.writes
    writer.partial.write_bytes(b"half")  # this process's JVM is writing it
    assert class_archive(str(spark_home)) is None  # a bridge starting meanwhile runs without, writes nothing


def test_turned_off(spark_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AQUEDUCT_CLASS_ARCHIVE", "0")
    assert class_archive(str(spark_home)) is None
