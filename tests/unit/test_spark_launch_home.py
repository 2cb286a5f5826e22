"""The SPARK_HOME serve launches Spark with: pyspark's, less its zipped pyspark; and the static-source lookup answered here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aqueduct.bridge.app.spark_home import launch_home, prune
from aqueduct.bridge.app.static_sources import lookup_answered_here


@pytest.fixture
def pyspark_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A pip-installed pyspark's layout: its scripts, its jars, and the zips Spark puts on its workers' path."""
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    home = tmp_path / "site-packages" / "pyspark"
    (home / "python" / "lib").mkdir(parents=True)
    (home / "python" / "lib" / "pyspark.zip").write_bytes(b"PK")
    (home / "jars").mkdir()
    (home / "jars" / "spark-core.jar").write_bytes(b"PK")
    (home / "bin").mkdir()
    (home / "bin" / "spark-submit").write_text("#!/bin/sh\necho submitted from $(dirname $0)\n")
    (home / "bin" / "spark-submit").chmod(0o755)
    (home / "__init__.py").write_text("")
    return home


def test_the_launch_home_is_pyspark_less_its_zipped_copy(pyspark_home: Path, tmp_path: Path) -> None:
    home = Path(launch_home(str(pyspark_home), tmp_path / "cache"))
    assert home.parent == tmp_path / "cache"
    assert sorted(p.name for p in home.iterdir()) == ["__init__.py", "bin", "jars"]
    assert not (home / "python" / "lib" / "pyspark.zip").exists()  # Spark's path to it names nothing
    assert (home / "jars" / "spark-core.jar").read_bytes() == b"PK"
    ran = subprocess.run([home / "bin" / "spark-submit"], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == f"submitted from {home / 'bin'}"
    assert launch_home(str(pyspark_home), tmp_path / "cache") == str(home)  # made once, then reused


def test_pyspark_is_launched_as_it_is_when_its_workers_may_need_the_zip(
    pyspark_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/some-other-python")  # may have no pyspark installed
    assert launch_home(str(pyspark_home), tmp_path / "cache") == str(pyspark_home)
    monkeypatch.delenv("PYSPARK_PYTHON")
    assert launch_home(str(pyspark_home), tmp_path / "cache") == str(pyspark_home)


def test_a_spark_without_the_zip_or_without_a_cache_is_launched_as_it_is(pyspark_home: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    assert launch_home(str(pyspark_home), blocked / "cache") == str(pyspark_home)
    (pyspark_home / "python" / "lib" / "pyspark.zip").unlink()
    assert launch_home(str(pyspark_home), tmp_path / "cache") == str(pyspark_home)


def test_homes_of_uninstalled_pysparks_and_dead_makers_partials_are_pruned(pyspark_home: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    home = Path(launch_home(str(pyspark_home), cache))
    dead = cache / "spark-home-0123.999999999.partial"
    dead.mkdir()
    living = cache / f"spark-home-0123.{os.getpid()}.partial"
    living.mkdir()
    prune(cache)
    assert home.is_dir() and living.is_dir() and not dead.exists()
    for entry in pyspark_home.iterdir():  # pyspark uninstalled
        if entry.name == "jars":
            entry.rename(tmp_path / "gone")
    prune(cache)
    assert not home.exists()


def test_the_static_source_lookup_is_answered_here_only_without_pyspark_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    monkeypatch.chdir(tmp_path)
    assert lookup_answered_here()
    (tmp_path / "pyspark_mysource.py").write_text("")  # Spark's worker, run with ``python -m`` here, would import it
    assert not lookup_answered_here()
    (tmp_path / "pyspark_mysource.py").unlink()
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", "/usr/bin/some-other-python")  # its path may hold some
    assert not lookup_answered_here()
