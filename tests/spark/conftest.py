"""One local SparkSession for every Spark test (starting one costs ~20 s)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A ``local[2]`` session on loopback with the ``aqueduct`` source registered.

    Python workers are spawned by the JVM, so they must run this very
    interpreter (``PYSPARK_PYTHON``) to import ``aqueduct``.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from aqueduct.bridge.source import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("aqueduct-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One standalone Spark cluster (master + two workers) shared by every cluster test.

    Its executors cannot see :attr:`~tests.spark.standalone.StandaloneCluster.hidden`,
    where the tests' bridges keep their logs (see :mod:`tests.spark.standalone`).
    """
    from tests.spark.standalone import StandaloneCluster

    c = StandaloneCluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.start()
        yield c
    finally:
        c.stop()
