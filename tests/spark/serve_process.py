"""``aqueduct-bridge serve`` as a subprocess for the Spark tests that start one by hand (its own Spark driver JVM).

The command line of a small local bridge (``local[1]``, a Parquet sink
under the test's directory) shared by the tests that
run such a bridge under a fault of their own (a full disk, its JVM ending
first).
"""

from __future__ import annotations

import sys
from pathlib import Path

TIMEOUT = 180.0  # generous: only there to turn a hang into a failure


def bridge_command(port: int, tmp: Path) -> list[str]:
    """``serve`` on TCP ``port`` with its log, Parquet output and checkpoint under ``tmp``."""
    script = Path(sys.executable).with_name("aqueduct-bridge")
    program = [str(script)] if script.exists() else [sys.executable, "-m", "aqueduct.bridge.app.cli"]
    return [
        *program, "serve", "--tcp", f"127.0.0.1:{port}", "--log", str(tmp / "log"),
        "--output", str(tmp / "out"), "--master", "local[1]", "--trigger-interval", "0.5",
        "--max-lag", "200", "--credits", "256", "--status-interval", "1",
    ]  # fmt: skip

