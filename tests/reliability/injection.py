"""The test's side of ``inject/sitecustomize.py``: the environment that arms a fault in a child process."""

from __future__ import annotations

import os
from pathlib import Path

INJECT_DIR = Path(__file__).parent / "inject"


def fault_env(fault: str, mark: Path, log: Path | None = None) -> dict[str, str]:
    """Environment for a child that meets ``fault`` (see ``inject/sitecustomize.py``) and notes it in ``mark``.

    The directory goes first on ``PYTHONPATH``, so Python imports its
    ``sitecustomize`` at start, in the child and the Python processes it
    starts; the product itself has no hook. ``log``: only that log's
    files meet the fault (not those of any other log a process there writes).
    """
    path = os.pathsep.join(p for p in (str(INJECT_DIR), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path, "AQUEDUCT_TEST_FAULT": fault, "AQUEDUCT_TEST_FAULT_MARK": str(mark)}
    return env if log is None else env | {"AQUEDUCT_TEST_FAULT_LOG": str(log)}


def faults_reached(mark: Path) -> list[str]:
    """The faults the children reached so far, in order (each line: ``<fault> <pid>``)."""
    return mark.read_text().split("\n")[:-1] if mark.exists() else []
