"""What Spark's JVM prints reaches the bridge's log one record per event, and a stop's own noise stays out.

The lines go through a real pipe into :class:`JvmLog`'s reading thread, as
the JVM's stderr does. ``spark_stop_stderr.txt`` is what a bridge's JVM
printed when SIGINT stopped ``serve`` under load (pyspark 4.3, a Parquet
sink): 98 lines, five log4j events with their stack traces, none of them a
failure.
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aqueduct.bridge.app.jvm_log import JvmLog
from aqueduct.logs import configure_logging

STOP_SAMPLE = (Path(__file__).parent.parent / "vectors" / "spark_stop_stderr.txt").read_text()

#: a Python worker's traceback when the JVM side of its socket closed (the shape pyspark's worker prints)
WORKER_BROKEN_PIPE = """\
Traceback (most recent call last):
  File "/venv/lib/python3.12/site-packages/pyspark/python/lib/pyspark.zip/pyspark/daemon.py", line 228, in manager
  File "/venv/lib/python3.12/site-packages/pyspark/python/lib/pyspark.zip/pyspark/serializers.py", line 131, in write_int
BrokenPipeError: [Errno 32] Broken pipe
"""

#: a real failure: the query ended by an error of its own
QUERY_FAILED = """\
26/11/27 10:35:29 ERROR MicroBatchExecution: Query aqueduct [id = bb23, runId = 90d1] terminated with error
java.lang.NullPointerException: Cannot invoke "org.apache.spark.SparkContext.dagScheduler()" because it is null
\tat org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution.runActivatedStream(MicroBatchExecution.scala:337)
\tat java.base/java.lang.Thread.run(Thread.java:1583)
"""


def relay(text: str, stopping: bool = False) -> list[logging.LogRecord]:
    """Write ``text`` into a pipe read by a :class:`JvmLog`; the records it logged once it read to the end."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    spark_logger = logging.getLogger("aqueduct.bridge.app.jvm_log")
    spark_logger.addHandler(handler)
    spark_logger.setLevel(logging.DEBUG)
    try:
        read_end, write_end = os.pipe()
        jvm_log = JvmLog(read_end)
        if stopping:
            jvm_log.stopping()
        jvm_log.start()
        with os.fdopen(write_end, "w") as pipe:
            pipe.write(text)
        jvm_log.thread.join(10)
        assert not jvm_log.thread.is_alive()
    finally:
        spark_logger.removeHandler(handler)
        spark_logger.setLevel(logging.NOTSET)
    return records


def shown(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    """The records an operator sees (the bridge logs at INFO)."""
    return [r for r in records if r.levelno >= logging.INFO]


def test_a_stop_under_load_prints_nothing_of_the_tasks_it_interrupted() -> None:
    records = relay(STOP_SAMPLE + WORKER_BROKEN_PIPE, stopping=True)
    assert len(records) == 6  # five log4j events and the worker's traceback, each with its trace
    assert shown(records) == []


#: a killed task's status arriving after the stop shut the scheduler's result pool down (seen in a real stop)
LATE_STATUS = """\
26/11/27 18:50:51 ERROR TaskSchedulerImpl: Exception in statusUpdate
java.util.concurrent.RejectedExecutionException: Task org.apache.spark.scheduler.TaskResultGetter$$Lambda$3705/0x00007f086e22eb78@53dbb1ca rejected from java.util.concurrent.ThreadPoolExecutor@55c52f48[Terminated, pool size = 0, active threads = 0, queued tasks = 0, completed tasks = 2]
\tat java.base/java.util.concurrent.ThreadPoolExecutor$AbortPolicy.rejectedExecution(ThreadPoolExecutor.java:2065)
\tat org.apache.spark.scheduler.TaskResultGetter.enqueueFailedTask(TaskResultGetter.scala:140)
\tat org.apache.spark.scheduler.TaskSchedulerImpl.statusUpdate(TaskSchedulerImpl.scala:877)
"""


def test_a_task_status_arriving_after_the_stop_is_kept_out_only_during_a_stop() -> None:
    assert shown(relay(LATE_STATUS, stopping=True)) == []
    (record,) = shown(relay(LATE_STATUS))
    assert record.levelno == logging.ERROR


def test_the_same_lines_outside_a_stop_are_all_shown_at_their_level_with_their_traces() -> None:
    records = relay(STOP_SAMPLE + WORKER_BROKEN_PIPE)
    assert [(r.levelname, r.fields["spark_logger"]) for r in shown(records)] == [  # type: ignore[attr-defined]
        ("ERROR", "Utils"),
        ("ERROR", "FileFormatWriter"),
        ("ERROR", "FileFormatWriter"),
        ("WARNING", "DAGScheduler"),
        ("WARNING", "TaskSetManager"),
        ("ERROR", "python"),
    ]
    utils = records[0]
    assert utils.getMessage() == "Aborting task"
    trace = utils.fields["trace"].splitlines()  # type: ignore[attr-defined]
    assert trace[0] == "java.io.InterruptedIOException: java.lang.InterruptedException"
    assert "Caused by: java.lang.InterruptedException" in trace
    assert records[-1].fields["trace"].endswith("BrokenPipeError: [Errno 32] Broken pipe")  # type: ignore[attr-defined]
    # nothing lost: the records hold every line the JVM printed, in order
    relayed = "\n".join(r.fields["relayed"] for r in records) + "\n"  # type: ignore[attr-defined]
    assert relayed == STOP_SAMPLE + WORKER_BROKEN_PIPE


def test_a_real_failure_during_a_stop_is_still_shown() -> None:
    records = relay(STOP_SAMPLE + QUERY_FAILED, stopping=True)
    (failure,) = shown(records)
    assert failure.levelname == "ERROR" and failure.fields["spark_logger"] == "MicroBatchExecution"  # type: ignore[attr-defined]
    assert "NullPointerException" in failure.fields["trace"]  # type: ignore[attr-defined]


def test_lines_not_from_log4j_are_records_of_their_own() -> None:
    text = (
        "WARNING: Using incubator modules: jdk.incubator.vector\n"
        "26/11/27 11:12:04 WARN Utils: Set SPARK_LOCAL_IP if you need to bind to another address\n"
        "Setting default log level to \"WARN\".\n"
    )
    records = relay(text)
    assert [(r.levelname, r.getMessage()) for r in records] == [
        ("INFO", "WARNING: Using incubator modules: jdk.incubator.vector"),
        ("WARNING", "Set SPARK_LOCAL_IP if you need to bind to another address"),
        ("INFO", 'Setting default log level to "WARN".'),
    ]


def test_hadoops_missing_native_library_is_kept_out_at_every_start_and_other_warnings_are_not() -> None:
    text = (
        "26/11/27 11:12:03 WARN NativeCodeLoader: Unable to load native-hadoop library for your platform... "
        "using builtin-java classes where applicable\n"
        "26/11/27 11:12:04 WARN MicroBatchExecution: Current batch is falling behind.\n"
    )
    records = relay(text)
    assert [(r.levelname, r.fields["spark_logger"]) for r in records] == [  # type: ignore[attr-defined]
        ("DEBUG", "NativeCodeLoader"),
        ("WARNING", "MicroBatchExecution"),
    ]


@pytest.fixture
def bridge_log() -> Iterator[Callable[[str], io.StringIO]]:
    """Set up the bridge's logging as ``serve`` does, in a format, into a string; undone after."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level

    def configure(log_format: str) -> io.StringIO:
        stream = io.StringIO()
        configure_logging(log_format, stream)
        return stream

    yield configure
    root.handlers[:] = before
    root.setLevel(level)
    logging.getLogger("aqueduct").setLevel(logging.NOTSET)


def test_with_json_logs_every_line_the_jvm_printed_becomes_one_json_object(
    bridge_log: Callable[[str], io.StringIO],
) -> None:
    output = bridge_log("json")
    relay("Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties\n" + QUERY_FAILED)
    docs = [json.loads(line) for line in output.getvalue().splitlines()]
    assert len(docs) == 2
    assert docs[1]["level"] == "ERROR" and docs[1]["logger"] == "aqueduct.bridge.app.jvm_log"
    assert docs[1]["spark_logger"] == "MicroBatchExecution"
    assert docs[1]["message"].startswith("Query aqueduct [id = bb23")
    assert docs[1]["trace"].startswith("java.lang.NullPointerException")
    assert "relayed" not in docs[1]


def test_in_text_logs_the_jvm_lines_read_as_the_jvm_printed_them(bridge_log: Callable[[str], io.StringIO]) -> None:
    output = bridge_log("text")
    relay(QUERY_FAILED)
    assert output.getvalue() == QUERY_FAILED
