"""A user's Spark application on the test cluster: one failover stream across the bridges of a bridge list.

``python failover_driver.py MASTER BRIDGE_LIST OUTPUT CHECKPOINT STOP_FILE``:
one streaming query over every bridge ``BRIDGE_LIST`` names (re-read at
every trigger), as consumer ``default``, into Parquet, until ``STOP_FILE``
appears (or the query dies). Exits 0 when it stopped the query itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bridges_query import run_until_stopped  # a sibling: this runs as a script

from aqueduct.bridge.app.pipeline import local_session, start_sink
from aqueduct.bridge.source import register


def main(master: str, bridge_list: str, output: str, checkpoint: str, stop_file: str) -> int:
    spark = local_session(master, "WARN", app_name="aqueduct-failover-test")
    register(spark)
    df = spark.readStream.format("aqueduct").option("bridgeList", bridge_list).option("consumer", "default").load()
    query = start_sink(
        df, "parquet", query_name="failover", checkpoint=Path(checkpoint), output_dir=Path(output),
        trigger_interval=0.5,
    )  # fmt: skip
    return run_until_stopped(spark, query, stop_file)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
