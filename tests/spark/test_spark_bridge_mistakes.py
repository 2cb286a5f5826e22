"""A ``SparkBridge`` job's mistakes, with real Spark: one line on the driver, not a JVM trace.

The refusals that need no session (the options ``serve`` refuses too) are
in ``tests/integration/test_spark_bridge_refusals.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aqueduct.bridge import SparkBridge
from aqueduct.bridge.source.options import AqueductOptionError
from aqueduct.bridge.storage.consumers import load_consumers

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TIMEOUT = 180.0  # only turns a hang into a failure


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"maxRecordPerTrigger": "10"},
         "aqueduct source: unknown option 'maxRecordPerTrigger'; did you mean 'maxRecordsPerTrigger'?"),
        ({"maxRecordsPerTrigger": "0"}, "aqueduct source: maxRecordsPerTrigger must be a positive integer, got '0'"),
        ({"startingoffsets": "middle"},
         "aqueduct source: startingOffsets must be 'earliest', 'latest' or a JSON object "
         "{\"<stream id>\": <offset>, -2 (earliest) or -1 (latest)}, got 'middle'"),
    ],
)  # fmt: skip
async def test_a_source_option_mistake_is_one_line_on_the_driver_and_takes_no_consumer(
    spark: Any, tmp_path: Path, options: dict[str, str], error: str
) -> None:
    """``stream()`` checks its options as the source will: not a 45-line AnalysisException from ``load()``."""
    bridge = SparkBridge(spark, tmp_path / "log", tcp="127.0.0.1:0")
    await asyncio.to_thread(bridge.start)
    try:
        with pytest.raises(AqueductOptionError) as caught:
            bridge.stream("audit", **options)
        assert str(caught.value) == error
        assert "audit" not in load_consumers(tmp_path / "log")
        bridge.stream("audit", maxRecordsPerTrigger="10")  # corrected, the same consumer name is free
    finally:
        await asyncio.to_thread(bridge.stop)


JOB = """
import json, os, sys
from pyspark.sql import SparkSession
from aqueduct.bridge import SparkBridge

spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
with SparkBridge(spark, sys.argv[1], tcp="127.0.0.1:0") as bridge:
    query = bridge.stream().writeStream.format("memory").queryName("rows").start()
    query.processAllAvailable()
    error = query.exception()
    query.stop()
print(json.dumps({"PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON"), "pythonExec": spark.sparkContext.pythonExec,
                  "error": None if error is None else str(error)[:300]}))
spark.stop()
"""


def test_a_job_that_chose_no_python_runs_its_workers_on_its_own_interpreter(tmp_path: Path) -> None:
    """As ``serve`` does: without it, Spark's workers run ``python3`` from PATH (another version, or no aqueduct)."""
    (tmp_path / "job.py").write_text(JOB)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    done = subprocess.run([sys.executable, str(tmp_path / "job.py"), str(tmp_path / "log")], capture_output=True,
                          text=True, timeout=TIMEOUT, env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.splitlines()[-1])
    assert outcome == {"PYSPARK_PYTHON": sys.executable, "pythonExec": sys.executable, "error": None}
