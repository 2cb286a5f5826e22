"""A user's Spark application on the test cluster, reading several bridges over Flight.

``python cluster_driver.py MASTER BRIDGES TOKENS CAS OUTPUT CHECKPOINT STOP_FILE``:
first shows that a wrong and a missing credential are refused (printing
the errors), then runs one streaming query over every bridge, as consumer
``default``, into Parquet, until ``STOP_FILE`` appears (or the query dies).
Exits 0 when it stopped the query itself.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from bridges_query import read_bridges, run_until_stopped  # a sibling: this runs as a script

from aqueduct.bridge.app.pipeline import local_session, start_sink
from aqueduct.bridge.source import register


def main(master: str, bridges: str, tokens: str, cas: str, output: str, checkpoint: str, stop_file: str) -> int:
    spark = local_session(master, "WARN", app_name="aqueduct-cluster-test")
    register(spark)
    wrong = Path(tempfile.mkdtemp()) / "wrong.token"
    wrong.write_text("not-the-token\n")
    names = [part.partition("=")[0] for part in bridges.split(",")]
    attempts = {
        "wrong": {"bridgeTokenFile": ",".join(f"{n}={wrong}" for n in names)},
        "missing": {"bridgeTokenEnv": "AQUEDUCT_TEST_NO_SUCH_VARIABLE"},
    }
    for what, options in attempts.items():
        try:
            spark.read.format("aqueduct").option("bridge", bridges).option("bridgeCA", cas).options(**options).load().count()
        except Exception as e:  # noqa: BLE001 - printed for the test to check
            print(f"{what} credential refused: {str(e).splitlines()[0][:300]} {_reason(e)}", flush=True)
        else:
            print(f"{what} credential was NOT refused", flush=True)
            return 1
    df = read_bridges(spark, bridges, tokens, cas)
    query = start_sink(
        df, "parquet", query_name="over-bridges", checkpoint=Path(checkpoint), output_dir=Path(output),
        trigger_interval=0.5,
    )  # fmt: skip
    return run_until_stopped(spark, query, stop_file)


def _reason(e: Exception) -> str:
    """The line of a (possibly JVM-wrapped) error that names the cause."""
    for line in str(e).splitlines():
        if "credential" in line:
            return line.strip()[:300]
    return ""


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
