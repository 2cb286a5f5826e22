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

import sys

from bridges_query import read_bridges, run_until_stopped  # a sibling: this runs as a script
from pyspark.sql import SparkSession

from aqueduct.bridge.source import register


def main(remote: str, bridges: str, tokens: str, cas: str, output: str, checkpoint: str, stop_file: str) -> int:
    spark = SparkSession.builder.remote(remote).getOrCreate()
    assert spark.__class__.__module__.startswith("pyspark.sql.connect"), spark.__class__
    register(spark)  # the documented call, unchanged on Connect
    df = read_bridges(spark, bridges, tokens, cas)
    query = (
        df.writeStream.format("parquet").option("path", output).option("checkpointLocation", checkpoint)
        .trigger(processingTime="0.5 seconds").start()
    )  # fmt: skip
    return run_until_stopped(spark, query, stop_file)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
