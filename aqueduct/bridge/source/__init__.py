"""The Spark source ``aqueduct``: reads the durable log into Structured Streaming.

::

    from aqueduct.bridge.source import register
    register(spark)
    df = spark.readStream.format("aqueduct").option("log", "/var/lib/aqueduct/log").load()

:mod:`.datasource` is the pyspark data source (the only module of this room
that imports pyspark); :mod:`.options` validates its options; :mod:`.admission`
chooses a micro-batch's end (whole epochs within a budget); :mod:`.planning`
cuts it into input partitions; :mod:`.lag` says how far a consumer is behind;
:mod:`.clock` is the time the stream reader waits by (handed in, so tests drive it).
With ``failover``, :mod:`.failover` reads one stream across bridges in
points of reference: :mod:`.id_space` holds its rules (sans-IO),
:mod:`.failover_read` an executor's side, :mod:`.failover_bridges` and
:mod:`.bridge_list` the bridges behind it, :mod:`.points` its offsets.

Neighbours: it reads the storage room only; the application room starts it.
``register`` is loaded on first use, so importing the planning modules (as
``status`` does) never loads pyspark.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["register"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(import_module("aqueduct.bridge.source.datasource"), name)
    raise AttributeError(f"module 'aqueduct.bridge.source' has no attribute {name!r}")
