"""A Spark Connect thin client whose streaming query reads bridges over Flight.

``python connect_client.py sc://HOST:PORT BRIDGES TOKENS CAS OUTPUT CHECKPOINT STOP_FILE``:
what a notebook on hosted Spark does. This process has no JVM and no
Spark driver: it registers the ``aqueduct`` source with the Connect
server's session (the class travels pickled; the server's Python workers
import it), then runs one streaming query over every bridge as consumer
``default`` into Parquet until ``STOP_FILE`` appears. Only file paths of
the token and CA travel in the options; the server's driver reads them.
Exits 0 when it stopped the query itself.
"""

from __future__ import annotations

import os
import sys
import time

from pyspark.sql import SparkSession

from aqueduct.bridge.source import register

RUN_LIMIT = 600.0  # seconds: a hang guard only


def main(remote: str, bridges: str, tokens: str, cas: str, output: str, checkpoint: str, stop_file: str) -> int:
    spark = SparkSession.builder.remote(remote).getOrCreate()
    assert spark.__class__.__module__.startswith("pyspark.sql.connect"), spark.__class__
    register(spark)  # the documented call, unchanged on Connect
    df = (
        spark.readStream.format("aqueduct").option("bridge", bridges).option("bridgeTokenFile", tokens)
        .option("bridgeCA", cas).option("consumer", "default").load()
    )  # fmt: skip
    query = (
        df.writeStream.format("parquet").option("path", output).option("checkpointLocation", checkpoint)
        .trigger(processingTime="0.5 seconds").start()
    )  # fmt: skip
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


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
