"""Spark's lookup of static Python data sources, answered from the bridge's own process when it is sure.

The first Python data source a session registers or reads makes Spark
(4.x, ``DataSourceManager``) look for *static* ones: it starts a Python
worker (``pyspark.sql.worker.lookup_data_sources``) that imports pyspark
and lists every top-level module named ``pyspark_*`` on its path, then
waits for it. That is one more Python interpreter on the way to the first
ACK, before the bridge's own source can be registered, and on a machine
with no ``pyspark_*`` package it finds nothing.

The worker runs this interpreter (``PYSPARK_PYTHON``, which ``serve`` sets
to it) with this process's ``PYTHONPATH`` and working directory, behind
pyspark's own zips, which hold no ``pyspark_*`` module. So when the same
listing here finds none, its answer is known: "none", and Spark is told so
(its cache of the lookup, ``DataSourceManager.dataSourceBuilders``, set to
an empty map before anything reads it). When there is any ``pyspark_*``
module, another interpreter is configured, or the cache is not where this
Spark keeps it, Spark looks as it always does.
"""

from __future__ import annotations

import logging
import os
import pkgutil
import sys
from typing import Any

from aqueduct.bridge.app.spark_home import is_this_interpreter

logger = logging.getLogger(__name__)

PREFIX = "pyspark_"  # what Spark's lookup imports (lookup_data_sources.py)


def lookup_answered_here() -> bool:
    """True when Spark's lookup would run this interpreter on this path and find no ``pyspark_*`` module."""
    python = os.environ.get("PYSPARK_DRIVER_PYTHON") or os.environ.get("PYSPARK_PYTHON")
    if python is None or not is_this_interpreter(python):
        return False
    path = [os.getcwd(), *sys.path]  # ``python -m``: its working directory first
    return not any(module.name.startswith(PREFIX) for module in pkgutil.iter_modules(path))


def skip_static_lookup(spark: Any) -> bool:
    """Tell ``spark``'s JVM there are no static Python data sources, if that is sure and it has not looked yet.

    Call before the first Python data source is registered. True if Spark
    will not start its lookup worker.
    """
    if not lookup_answered_here():
        return False
    try:
        jvm = spark.sparkContext._jvm
        manager = getattr(getattr(jvm.org.apache.spark.sql.execution.datasources, "DataSourceManager$"), "MODULE$")
        if not manager.dataSourceBuilders().isEmpty():
            return True  # looked already (a session before this one)
        none = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jvm.java.util.HashMap())
        getattr(manager, "dataSourceBuilders_$eq")(jvm.scala.Some(none))
    except Exception as exc:  # noqa: BLE001 - another Spark: it looks as it always does
        logger.debug("Spark's static Python data source lookup left as is: %r", exc)
        return False
    return True
