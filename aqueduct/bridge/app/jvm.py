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

Its stderr comes to the bridge through a pipe, read by
:class:`~aqueduct.bridge.app.jvm_log.JvmLog` into the bridge's own log
(``--log-format json`` included), which keeps out what a stop causes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

from aqueduct.bridge.app.class_archive import ClassArchive, cache_dir, class_archive, keep_archive
from aqueduct.bridge.app.jvm_log import JvmLog
from aqueduct.bridge.app.spark_home import launch_home

logger = logging.getLogger(__name__)

_jvm_log: JvmLog | None = None  # the stderr reader of the JVM this process launched
_launching: Future[None] | None = None  # a launch begun early, not yet waited for
LAST_WORDS_WAIT = 1.0  # seconds an ended JVM's stderr gets to be read to its end (its workers may hold it)
_archive: ClassArchive | None = None  # the class archive the launched JVM maps or writes (:mod:`.class_archive`)
#: the driver JVM's options for a faster start (docs/performance.md, "First ACK after a cold serve"): its
#: compilers stop at C1, whose code is ready sooner for less CPU, and the serial collector, which starts
#: less machinery than G1 for a heap of Spark's driver size
DRIVER_JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def start_gateway_launch(master: str) -> Future[None]:
    """Begin launching Spark's JVM (:func:`launch_detached_gateway`) in a thread of its own; return at once.

    ``serve`` calls it as soon as its options are checked: the JVM then
    starts while the bridge imports the rest of itself, opens its log and
    listens, instead of after. The launch's error, if any, is raised where
    the gateway is needed (:func:`launch_detached_gateway`).
    """
    global _launching
    launching: Future[None] = Future()

    def launch() -> None:
        try:
            _launch(master)
        except BaseException as exc:  # noqa: BLE001 - raised again by whoever needs the gateway
            launching.set_exception(exc)
        else:
            launching.set_result(None)

    _launching = launching
    threading.Thread(target=launch, name="jvm-launch", daemon=True).start()
    return launching


def launch_detached_gateway(master: str) -> None:
    """Start pyspark's JVM gateway in a new session, unless this process has one already.

    Call before the first ``SparkSession.builder.getOrCreate()``: that
    then uses this gateway (``SparkContext._gateway``) instead of launching
    its own. A launch begun earlier (:func:`start_gateway_launch`) is
    waited for, and its error raised, rather than launched again.
    """
    global _launching
    launching, _launching = _launching or start_gateway_launch(master), None
    launching.result()


def _launch(master: str) -> None:
    """The launch itself: Spark settings still go through the builder, the rest as pyspark always takes it.

    The launch takes ``PYSPARK_SUBMIT_ARGS`` and ``spark-defaults``; its
    stderr goes through :class:`JvmLog` into this process's logging.
    ``SPARK_HOME`` (unless set) is the one pyspark found already
    (``spark-submit`` would otherwise start a Python interpreter to look
    for it again), less its zipped copy of pyspark
    (:func:`~aqueduct.bridge.app.spark_home.launch_home`), so that Spark's
    Python workers import the compiled one.

    For a ``local`` master the driver binds to loopback anyway
    (:func:`~aqueduct.bridge.app.pipeline.local_session`): ``SPARK_LOCAL_IP``
    (unless set) tells the JVM so before it looks for an address of its
    own, which on a host whose name resolves to loopback (Debian's
    ``127.0.1.1``) it would warn about at every start.
    """
    global _jvm_log
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is None:
            spark_home = os.environ["SPARK_HOME"] = launch_spark_home()  # the JVM's environment is a copy of ours
            if master.startswith("local"):
                os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            # Read before the launch returns: a JVM that fails to start says why there.
            read_end, write_end = os.pipe()
            _jvm_log = JvmLog(read_end).start()
            try:
                with _driver_options(spark_home):
                    gateway = launch_gateway(popen_kwargs={"start_new_session": True, "stderr": write_end})
            finally:
                os.close(write_end)  # the JVM has its copy: end of file once it and its workers end
            SparkContext._gateway = gateway
            SparkContext._jvm = gateway.jvm


def launch_spark_home() -> str:
    """The ``SPARK_HOME`` Spark's JVM is launched with: the user's if set, else pyspark's own less its zipped pyspark."""
    if "SPARK_HOME" in os.environ:
        return os.environ["SPARK_HOME"]
    from pyspark.find_spark_home import _find_spark_home

    return launch_home(_find_spark_home(), cache_dir())


@contextlib.contextmanager
def _driver_options(spark_home: str) -> Iterator[None]:
    """``PYSPARK_SUBMIT_ARGS`` for the launch: :data:`DRIVER_JAVA_OPTIONS` and the class archive's.

    Not when the user set ``PYSPARK_SUBMIT_ARGS``: their launch is theirs.
    They go in ``spark.driver.defaultJavaOptions``, which the JVM's command
    puts before ``spark.driver.extraJavaOptions`` (a ``spark-defaults.conf``'s stay).
    """
    global _archive
    if "PYSPARK_SUBMIT_ARGS" in os.environ:
        yield
        return
    _archive = class_archive(spark_home)
    options = [*DRIVER_JAVA_OPTIONS, *(_archive.java_options() if _archive is not None else ())]
    if not options:
        yield
        return
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--conf {shlex.quote('spark.driver.defaultJavaOptions=' + ' '.join(options))} pyspark-shell"
    try:
        yield
    finally:
        del os.environ["PYSPARK_SUBMIT_ARGS"]


def keep_class_archive() -> None:
    """Once the bridge's Spark stopped: end its JVM and keep the class archive it writes, if it writes one.

    A no-op unless this process launched the JVM and no archive was there
    (:mod:`.class_archive`): the first ``serve`` on a machine, or after Java
    or Spark changed.
    """
    if _archive is None or not _archive.writes:
        return
    from pyspark import SparkContext

    proc: Any = getattr(SparkContext._gateway, "proc", None)
    if proc is not None:
        keep_archive(_archive, proc)


def stopping_spark() -> None:
    """The bridge is about to stop its query and session: what that causes in the JVM's log is not news.

    No-op for a JVM this process did not launch (a ``SparkBridge``'s, a
    ``spark-submit``'s): its output is not the bridge's to filter.
    """
    if _jvm_log is not None:
        _jvm_log.stopping()


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
    if _jvm_log is not None:  # its last words before the bridge's line about its end
        _jvm_log.thread.join(LAST_WORDS_WAIT)
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


#: Spark's log4j loggers that report what stopping a query causes, nothing gone wrong: the tasks it
#: interrupts and kills, their writes aborted, the job group already gone (see ``jvm_log.STOP_CAUSED``)
STOP_LOGGERS = (
    "org.apache.spark.util.Utils",  # "Aborting task", with the InterruptedException
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",  # "Aborting job", "... aborted."
    "org.apache.spark.scheduler.DAGScheduler",  # "Failed to cancel job group"
    "org.apache.spark.scheduler.TaskSetManager",  # "Lost task ... TaskKilled"
    "org.apache.spark.executor.Executor",  # a killed task's interrupted I/O
    "org.apache.spark.storage.DiskBlockObjectWriter",  # "Error deleting" a killed task's shuffle files, one a file
)


TASKS_END_WAIT = 10.0  # seconds a stop's killed tasks get to report their end while the loggers are quiet


def _wait_for_killed_tasks(spark: Any, timeout: float) -> None:
    """Until no executor runs a task (at most ``timeout`` s): a stopped query's tasks end after the stop returns.

    A query's stop cancels its job and returns; the executors report the
    killed tasks afterwards (``TaskSetManager``'s "Lost task ... TaskKilled"),
    so the loggers are put back only once those reports came.
    """
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(e.numRunningTasks() for e in tracker.getExecutorInfos()):
        time.sleep(0.05)


@contextlib.contextmanager
def quiet_stop(spark: Any) -> Iterator[None]:
    """Silence :data:`STOP_LOGGERS` in ``spark``'s JVM while the block stops queries; restored after.

    For a JVM this process does not read (a ``SparkBridge``'s: the user's
    own session, its stderr on the user's terminal), what a stop causes
    cannot be filtered line by line as ``serve`` does (:mod:`.jvm_log`); so
    the few loggers that report it are turned off for the stop's duration
    and put back as they were (a logger with no level of its own loses the
    one set here). The rest of the JVM's log, errors included, is untouched.
    A JVM that is gone or has no log4j 2 is left alone.

    Not reached this way, as they do not go through log4j: the traceback a
    Python worker prints when the JVM closes its socket under a killed task
    (``BrokenPipeError``), and, for a ``foreachBatch`` query interrupted
    inside its Python function, the ``StackOverflowError`` Spark's own check
    "did the stop cause this?" (a regular expression over the long Python
    error) can hit, printed by the JVM's handler of uncaught exceptions.
    A ``SparkBridge`` avoids both by stopping its queries between
    micro-batches (:mod:`.query_stop`); they remain for a query stopped
    inside one.
    """
    try:
        jvm = spark.sparkContext._jvm
        log4j = jvm.org.apache.logging.log4j
        context = log4j.LogManager.getContext(False)
        config = context.getConfiguration()
        own = config.getLoggers()
        before = {name: own.get(name).getLevel() if own.containsKey(name) else None for name in STOP_LOGGERS}
        for name in STOP_LOGGERS:
            log4j.core.config.Configurator.setLevel(name, log4j.Level.OFF)
    except Exception as exc:  # noqa: BLE001 - the JVM is gone, or logs otherwise: stop as is
        logger.debug("cannot quiet Spark's stop: %r", exc)
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # the JVM went away during the stop: nothing to restore
            _wait_for_killed_tasks(spark, TASKS_END_WAIT)
            for name, level in before.items():
                if level is None:
                    config.removeLogger(name)
                else:
                    log4j.core.config.Configurator.setLevel(name, level)
            context.updateLoggers()


def stopped_by_signal(how: str | None) -> bool:
    """True if the JVM ended from a stop request (SIGTERM/SIGINT/SIGHUP), as a service manager sends."""
    return how is not None and any(name in how for name in ("SIGTERM", "SIGINT", "SIGHUP"))
