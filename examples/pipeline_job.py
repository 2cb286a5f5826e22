"""A pipeline for ``aqueduct-bridge serve --pipeline pipeline_job:build``.

The bridge calls ``build(df)`` with the log as a streaming DataFrame
(columns: stream_id, message_id, payload, event_time, key, epoch,
stream_name, connector) and runs what it returns; producers are acked once
this query's sink committed. Here: JSON payloads parsed into columns and
appended to Parquet at ``$EVENTS_PATH`` (default ``events``), partitioned
by user. Spark's file sink commits each batch exactly once. Run it from
this directory (or put it on ``PYTHONPATH``)::

    EVENTS_PATH=/data/events aqueduct-bridge serve --tcp 0.0.0.0:7447 --log /data/aq \\
        --checkpoint /data/events-checkpoint --pipeline pipeline_job:build
"""

from __future__ import annotations

import os

from pyspark.sql.functions import col, from_json
from pyspark.sql.types import DoubleType, StringType, StructField, StructType

SCHEMA = StructType([StructField("user", StringType()), StructField("amount", DoubleType())])


def build(df):
    """Parse, keep valid events, and hand back the writer (the bridge starts it)."""
    events = (
        df.select("stream_id", "message_id", from_json(col("payload").cast("string"), SCHEMA).alias("e"))
        .where(col("e.user").isNotNull())
        .select("stream_id", "message_id", "e.user", "e.amount")
    )
    return (
        events.writeStream.format("parquet")
        .option("path", os.environ.get("EVENTS_PATH", "events"))
        .partitionBy("user")
        .trigger(processingTime="1 second")
    )
