"""The user's own pipeline on the test cluster: a ``SparkBridge`` in a driver whose master is the cluster.

``python cluster_receiver.py MASTER LOG TCP_PORT OUTPUT CHECKPOINT STOP_FILE``:
the README's shape (``with SparkBridge(...) as bridge``, ``bridge.stream()``, a sink,
``bridge.ack_after``), unchanged for a cluster: the bridge serves the log
over Flight because the master is not local. Runs until ``STOP_FILE``
appears; exits 0 if the query was still running then.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from aqueduct.bridge.app.pipeline import local_session, start_sink
from aqueduct.bridge.app.spark_bridge import SparkBridge

RUN_LIMIT = 600.0  # seconds: a hang guard only


def main(master: str, log: str, port: str, output: str, checkpoint: str, stop_file: str) -> int:
    spark = local_session(master, "WARN", app_name="aqueduct-receiver-test")
    with SparkBridge(spark, log=log, tcp=f"127.0.0.1:{port}") as bridge:
        print(f"bridge reads the log at {bridge.flight_address}", flush=True)
        query = start_sink(
            bridge.stream(), "parquet", query_name="receiver", checkpoint=Path(checkpoint),
            output_dir=Path(output), trigger_interval=0.5,
        )  # fmt: skip
        bridge.ack_after(query)
        print("query started", flush=True)
        deadline = time.monotonic() + RUN_LIMIT
        while not os.path.exists(stop_file) and query.isActive and time.monotonic() < deadline:
            time.sleep(0.25)
        active = query.isActive
    spark.stop()
    return 0 if active else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
