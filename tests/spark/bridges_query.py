"""What the two cluster clients share: one query over every bridge, run until a stop file appears.

Imported as a sibling module by ``cluster_driver.py`` (a driver on the
cluster) and ``connect_client.py`` (a Spark Connect thin client), which run
as scripts: their directory is on ``sys.path``.
"""

from __future__ import annotations

import os
import time

RUN_LIMIT = 600.0  # seconds: a hang guard only


def read_bridges(spark, bridges: str, tokens: str, cas: str):  # noqa: ANN001, ANN201 - classic or Connect
    """The ``aqueduct`` stream over every bridge, as consumer ``default``; only file paths in the options."""
    return (
        spark.readStream.format("aqueduct").option("bridge", bridges).option("bridgeTokenFile", tokens)
        .option("bridgeCA", cas).option("consumer", "default").load()
    )  # fmt: skip


def run_until_stopped(spark, query, stop_file: str) -> int:  # noqa: ANN001 - classic or Connect
    """Run ``query`` until ``stop_file`` appears; 0 when it was still alive and stopped here."""
    print("query started", flush=True)
    deadline = time.monotonic() + RUN_LIMIT
    while not os.path.exists(stop_file) and query.isActive and time.monotonic() < deadline:
        time.sleep(0.25)
    active = query.isActive
    if not active:
        print(f"query died: {query.exception()}", flush=True)
    query.stop()
    spark.stop()
    return 0 if active and os.path.exists(stop_file) else 1
