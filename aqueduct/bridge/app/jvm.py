"""The bridge's own Spark JVM: started in a session of its own, and how to tell it is gone.

systemd and container runtimes stop a service by signalling its whole
process group. A JVM in the bridge's group would get that SIGTERM too and
exit at once, under a bridge that still has to stop its query and make its
log durable: every Py4J call then fails with a traceback. pyspark ignores
SIGINT in its JVM but not SIGTERM, and takes keyword arguments for the
JVM's ``Popen``; ``start_new_session`` puts the JVM in a session (and
process group) of its own, so only the bridge decides when it stops. It
still dies with the bridge: pyspark's gateway exits when its stdin pipe
from the bridge closes, a SIGKILLed bridge included.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from typing import Any

logger = logging.getLogger(__name__)


def launch_detached_gateway() -> None:
    """Start pyspark's JVM gateway in a new session, unless this process has one already.

    Call before the first ``SparkSession.builder.getOrCreate()``: that
    then uses this gateway (``SparkContext._gateway``) instead of launching
    its own. Spark settings still go through the builder; the launch takes
    what pyspark always takes (``PYSPARK_SUBMIT_ARGS``, ``spark-defaults``).
    """
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is None:
            SparkContext._gateway = launch_gateway(popen_kwargs={"start_new_session": True})
            SparkContext._jvm = SparkContext._gateway.jvm


def jvm_exit(wait: float = 0.0) -> str | None:
    """How the gateway JVM this process started ended ("killed by SIGKILL", "exit status 1").

    None if it still runs after ``wait`` seconds, or if this process did not
    start it (a JVM of ``spark-submit``, a shared session).
    """
    from pyspark import SparkContext

    proc: Any = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return None
    try:
        code = proc.wait(wait)
    except subprocess.TimeoutExpired:
        return None
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    if code > 128 and code - 128 in signal.Signals._value2member_map_:
        return f"ended by {signal.Signals(code - 128).name} (exit status {code})"
    return f"exit status {code}"


def quiet_accumulator_server(spark: Any) -> None:
    """One log line, not a traceback, when pyspark's accumulator server loses its JVM mid-read.

    The server (a ``socketserver`` thread in this process) prints a
    traceback to stderr when the JVM's connection ends inside an update:
    exactly what a JVM ending first does. The bridge reports that itself.
    """
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, address: logger.warning(
            "Spark's accumulator connection from %s ended: %r", address, sys.exc_info()[1]
        )


def quiet_interrupted_shell(spark: Any) -> None:
    """No Java stack trace when the bridge stops its query while Spark writes a checkpoint file.

    ``query.stop()`` interrupts the query's thread wherever it is. On a
    local file system without Hadoop's native library, Spark's checkpoint
    and sink writes set permissions by forking ``chmod`` through Hadoop's
    ``Shell``, which logs an interrupted wait for it as a warning with a
    stack trace: fifty lines on every Ctrl-C that lands there, for nothing
    wrong (the write-then-rename leaves no torn file, and the batch whose
    commit it cut short is re-run from its checkpoint). Its real failures
    (a command that exits non-zero) are exceptions, reported where they land.
    """
    jvm = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.ERROR
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel("org.apache.hadoop.util.Shell", level)


def stopped_by_signal(how: str | None) -> bool:
    """True if the JVM ended from a stop request (SIGTERM/SIGINT/SIGHUP), as a service manager sends."""
    return how is not None and any(name in how for name in ("SIGTERM", "SIGINT", "SIGHUP"))
