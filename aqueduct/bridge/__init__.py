"""The bridge: connector frames in, a durable log, Spark Structured Streaming out.

Its rooms, one job each (imports go down this list, never up):

- :mod:`.app`: the running bridge, ``aqueduct-bridge``, the ``SparkBridge``;
- :mod:`.network`: the log served to readers anywhere (Arrow Flight);
- :mod:`.ingest`: connector sessions into the log, ACKs after the sink commit;
- :mod:`.source`: the Spark source that reads the log;
- :mod:`.storage`: the durable log on disk and the files its readers share.

In your own Spark application: ``from aqueduct.bridge import SparkBridge``
(see :mod:`aqueduct.bridge.app.spark_bridge`), and ``repair_checkpoint`` for the
checkpoint of a query that may have been killed (see
:mod:`aqueduct.bridge.app.checkpoint`). They are loaded on first use, so that
Spark's Python workers, which import only the source, do not pay for the
listeners and the session machinery.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SparkBridge", "SparkBridgeError", "repair_checkpoint"]


def __getattr__(name: str) -> Any:
    if name == "repair_checkpoint":
        from aqueduct.bridge.app import checkpoint

        return checkpoint.repair_checkpoint
    if name in __all__:
        from aqueduct.bridge.app import spark_bridge

        return getattr(spark_bridge, name)
    if name in ("Receiver", "ReceiverError"):  # the old names, deprecated
        from aqueduct.bridge.app import spark_bridge

        return spark_bridge.renamed(name)
    raise AttributeError(f"module 'aqueduct.bridge' has no attribute {name!r}")
