"""The test's side of ``inject/sitecustomize.py``: the environment that arms a fault in a child process."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

INJECT_DIR = Path(__file__).parent / "inject"


def fault_env(fault: str, mark: Path, log: Path | None = None) -> dict[str, str]:
    """Environment for a child that meets ``fault`` (see ``inject/sitecustomize.py``) and notes it in ``mark``.

    The directory goes first on ``PYTHONPATH``, so Python imports its
    ``sitecustomize`` at start, in the child and the Python processes it
    starts; the product itself has no hook. ``log``: only that log's
    files meet the fault (a bridge's warm-up query reads a throw-away log).
    """
    path = os.pathsep.join(p for p in (str(INJECT_DIR), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path, "AQUEDUCT_TEST_FAULT": fault, "AQUEDUCT_TEST_FAULT_MARK": str(mark)}
    return env if log is None else env | {"AQUEDUCT_TEST_FAULT_LOG": str(log)}


def faults_reached(mark: Path) -> list[str]:
    """The faults the children reached so far, in order (each line: ``<fault> <pid>``)."""
    return mark.read_text().split("\n")[:-1] if mark.exists() else []


def kill_at_rename_env(target: Path, mark: Path, build: Path) -> dict[str, str]:
    """Environment for a child whose processes (a Spark JVM included) die by SIGKILL at the
    rename that would publish ``target`` (see ``inject/kill_at_rename.c``), noting it in ``mark``.

    A JVM's file writes never pass through Python, so the hook is a C
    library preloaded into every process the child starts: compiled here
    into ``build`` with the system's C compiler (``cc``).
    """
    library = build / "kill_at_rename.so"
    source = INJECT_DIR / "kill_at_rename.c"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(library), str(source), "-ldl"], check=True)
    return {
        "LD_PRELOAD": str(library),
        "AQUEDUCT_TEST_KILL_AT_RENAME": str(target),
        "AQUEDUCT_TEST_FAULT_MARK": str(mark),
    }
