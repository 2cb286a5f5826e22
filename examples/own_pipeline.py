"""Your own Spark job fed by aqueduct producers, exactly once into your own sink.

Run it with plain Python, with ``spark-submit``, or paste the body into a
notebook::

    python examples/own_pipeline.py --log /tmp/aq/log --out /tmp/aq/out --tcp 127.0.0.1:7447
    spark-submit examples/own_pipeline.py --log /tmp/aq/log --out /tmp/aq/out --quic 0.0.0.0:4433

Producers send JSON payloads such as ``{"user": "ada", "amount": 12.5}``
(``aqueduct-produce`` or :class:`aqueduct.connector.Connector`). The job
parses them, keeps the valid ones, and writes each micro-batch with
``foreachBatch`` to ``--out`` as one JSON-lines file per batch, named by
the batch id and written with an atomic rename. Spark may run a batch
again after a crash; it then holds exactly the same rows (the aqueduct
source's reads are deterministic) and overwrites the same file, so every
message lands exactly once. Producers are acked only after that write
and Spark's commit of the batch: a producer that got its ack can forget
the message.

Ctrl-C (or SIGTERM) stops taking records, makes what the bridge buffered
durable, lets the query finish its micro-batch and stops it between two
(a second Ctrl-C: at once), and releases the log; run the script again to
go on where it was.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# Spark's Python workers must be able to import aqueduct (the source lives
# there): run them with this interpreter unless told otherwise.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.functions import col, from_json  # noqa: E402
from pyspark.sql.types import DoubleType, StringType, StructField, StructType  # noqa: E402

from aqueduct.bridge import SparkBridge, repair_checkpoint  # noqa: E402

SCHEMA = StructType([StructField("user", StringType()), StructField("amount", DoubleType())])


def write_batch(out: Path, batch_df, batch_id: int) -> None:
    """The idempotent sink: one file per batch id, replaced whole if Spark re-runs the batch."""
    rows = batch_df.orderBy("stream_id", "message_id").collect()
    lines = "".join(json.dumps(row.asDict(), sort_keys=True) + "\n" for row in rows)
    final = out / f"batch-{batch_id:08d}.jsonl"
    tmp = out / f".batch-{batch_id:08d}.jsonl.tmp"
    tmp.write_text(lines)
    os.replace(tmp, final)  # readers see the old file or the new one, never half of it


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--log", required=True, type=Path, help="the bridge's durable log directory")
    p.add_argument("--out", required=True, type=Path, help="where the job writes its batches")
    p.add_argument("--checkpoint", type=Path, help="Spark checkpoint (default: OUT/_checkpoint)")
    p.add_argument("--tcp", help="HOST:PORT for connectors over TCP")
    p.add_argument("--quic", help="HOST:PORT for connectors over QUIC (Aqueduct)")
    p.add_argument(
        "--cookie-file", type=Path,
        help="file whose first line is the secret connectors must present (else $AQUEDUCT_COOKIE; "
        "a secret on the command line would show in `ps`)",
    )  # fmt: skip
    p.add_argument("--trigger", type=float, default=1.0, help="seconds between micro-batches")
    args = p.parse_args(argv)
    cookie = (
        (args.cookie_file.read_bytes().splitlines() or [b""])[0]
        if args.cookie_file
        else os.environ.get("AQUEDUCT_COOKIE", "").encode()
    )
    args.out.mkdir(parents=True, exist_ok=True)
    checkpoint = args.checkpoint or args.out / "_checkpoint"

    spark = SparkSession.builder.appName("my-aqueduct-job").getOrCreate()
    try:
        with SparkBridge(spark, log=args.log, tcp=args.tcp, quic=args.quic, cookie=cookie) as bridge:
            print(f"receiving on {bridge.tcp_address or bridge.quic_address}", flush=True)
            events = (
                bridge.stream()
                .select("stream_id", "message_id", from_json(col("payload").cast("string"), SCHEMA).alias("e"))
                .where(col("e.user").isNotNull())
                .select("stream_id", "message_id", "e.user", "e.amount")
            )
            query = (
                events.writeStream.foreachBatch(lambda df, batch_id: write_batch(args.out, df, batch_id))
                .option("checkpointLocation", repair_checkpoint(checkpoint))  # after a kill
                .trigger(processingTime=f"{args.trigger} seconds")
                .start()
            )
            bridge.ack_after(query)
            # Until the query ends or Ctrl-C / SIGTERM; then the with block stops cleanly.
            if not bridge.await_termination():
                print("stopping", flush=True)
        print("stopped", flush=True)  # buffered records durable, log released
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
