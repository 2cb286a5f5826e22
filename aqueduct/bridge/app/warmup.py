"""Cold-start work done before the bridge's query starts, so its first micro-batch does not wait on it.

A SparkSession's first streaming query over the ``aqueduct`` source pays
for things that have nothing to do with its records: spawning the
planner's and the executors' Python workers and importing pyarrow, pyspark
and this package in them, loading and compiling the JVM classes of a
micro-batch, the Parquet writer and the checkpoint logs. Measured on the
benchmark machine (``python -m bench.latency``), that made the first
micro-batch take 8.5 s where later ones took under 1 s.

:func:`warm_up` runs one ``Trigger.AvailableNow`` query of the same shape
(a one-record log in a temporary directory -> Parquet, with a checkpoint)
before the real query starts. The executor's Python worker it leaves idle
is reused by the real query's first task (Spark keeps idle workers for a
minute). Done once per SparkSession.
"""

from __future__ import annotations

import logging
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_warm: weakref.WeakSet[Any] = weakref.WeakSet()  # sessions that ran the warm-up query


def warm_up(spark: Any, timeout: float = 120.0) -> float | None:
    """Run the warm-up query once for ``spark``; its duration in seconds (None: was warm already)."""
    if spark in _warm:
        return None
    from aqueduct.bridge.storage.log import DurableLog
    from aqueduct.connector.frames import ConnectorMessage

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="aqueduct-warm-up-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        with DurableLog(work / "log") as log:
            log.open_stream(1, "warm-up", "bridge/warm-up").result()
            log.append(ConnectorMessage.build(1, b"warm-up", message_id=0))
            log.commit()
        # A per-trigger limit gives it the reader with admission control, the one pyspark runs
        # Trigger.AvailableNow on: the plain one makes Spark warn it "may not guarantee processing".
        query = (
            spark.readStream.format("aqueduct").option("log", str(work / "log"))
            .option("maxRecordsPerTrigger", "1000").load()
            .writeStream.format("parquet").option("path", str(work / "out"))
            .option("checkpointLocation", str(work / "checkpoint"))
            .trigger(availableNow=True).start()
        )  # fmt: skip
        try:
            if not query.awaitTermination(timeout):
                logger.warning("aqueduct-bridge: the warm-up query did not finish within %g s", timeout)
        finally:
            query.stop()
    _warm.add(spark)
    return time.monotonic() - started
