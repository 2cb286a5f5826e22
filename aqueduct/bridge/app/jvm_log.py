"""What the bridge's Spark JVM prints, read line by line and said through :mod:`logging`.

The JVM the bridge starts (:func:`aqueduct.bridge.app.jvm.launch_detached_gateway`)
writes to its stderr: log4j's lines at ``--spark-log-level``, the JVM's own
notes, and the tracebacks of the Python workers it forks (they share that
stderr). Left on the terminal, that text ignores ``--log-format json`` and
cannot be told apart from a real failure when a stop interrupts Spark's
running tasks. So the bridge reads it through a pipe instead, and:

- makes each line (with its stack trace or traceback, if any) one record of
  this module's logger, at log4j's level, with the log4j
  logger as field ``spark_logger``: with ``--log-format json`` one JSON
  object per event, a stack trace in its ``trace`` field; the text form
  prints it as the JVM did (field ``relayed``);
- once the bridge is stopping (:meth:`JvmLog.stopping`), keeps out at DEBUG
  the records a stop itself causes (:func:`harmless_on_stop`): tasks and
  threads interrupted or killed, Python workers whose socket the JVM closed.
  Anything else, and everything while the bridge is not stopping, is shown;
- keeps out at DEBUG, always, the few lines every start prints that ask
  nothing of anyone (:data:`HARMLESS`). The start's other harmless warnings
  are avoided at their source instead: adaptive query execution is off in
  the bridge's session (:func:`~aqueduct.bridge.app.pipeline.local_session`),
  and a local master's JVM is told its address (:func:`~aqueduct.bridge.app.jvm.launch_detached_gateway`).

Capture rather than log4j's JSON layout: the layout would not cover the
Python workers' tracebacks or the JVM's own lines, and the filter on a stop
needs to see every line anyway.
"""

from __future__ import annotations

import logging
import os
import re
import select
import threading
from dataclasses import dataclass, field

from aqueduct.logs import fields

logger = logging.getLogger(__name__)

#: log4j's line in Spark's default profile: ``%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex``
LOG4J_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ([^\s:]+): (.*)$")
LEVELS = {
    "TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
    "WARN": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL,
}  # fmt: skip
#: the first line of a Java exception under a log4j line: a qualified class name, maybe its message
JAVA_EXCEPTION = re.compile(r"^[a-zA-Z_$][\w$]*(\.[\w$]+)+(: .*)?$")
FLUSH_AFTER = 0.2  # seconds of silence after which the record read so far is complete

#: what a stop of the query and the session causes: (log4j logger or None for any, text in the record)
STOP_CAUSED = (
    (None, "InterruptedException"),  # a task or thread waiting when stop() interrupted it (Hadoop's Shell too)
    (None, "ClosedByInterruptException"),
    (None, "TaskKilledException"),  # a running task cancelled with its query
    ("TaskSetManager", "TaskKilled ("),  # "Lost task ... TaskKilled (Stage cancelled ...)"
    ("FileFormatWriter", " aborted."),  # "Job: ..., Task: ..., Task attempt ... aborted." of a killed task
    ("DAGScheduler", "Failed to cancel job group"),  # the query's jobs had already ended
    ("python", "BrokenPipeError"),  # a Python worker writing to a JVM side the stop closed
    ("python", "ConnectionResetError"),
    (None, "RpcEnvStoppedException"),  # a call into a SparkContext being stopped
    (None, "SparkContext was shut down"),
    # a killed task's status arriving after the stop shut the scheduler's result pool down
    ("TaskSchedulerImpl", "RejectedExecutionException"),
)
#: what every start prints that asks nothing of anyone: (log4j logger, text in the record)
HARMLESS = (
    # Hadoop's optional native code (compression, checksums) is not installed: its Java versions serve
    ("NativeCodeLoader", "Unable to load native-hadoop library"),
)


@dataclass
class JvmRecord:
    """One event the JVM printed: its header line and the trace lines that followed it."""

    level: int
    spark_logger: str  # the log4j logger (short name), "python" for a worker's traceback, "jvm" otherwise
    message: str
    line: str  # the header line as printed
    trace: list[str] = field(default_factory=list)
    closed: bool = False  # a Python traceback's final line was read: nothing more belongs to it

    def text(self) -> str:
        """The record as the JVM printed it."""
        return "\n".join([self.line, *self.trace])

    def takes(self, line: str) -> bool:
        """Whether ``line`` continues this record (a stack trace line), rather than starting one."""
        if self.closed or LOG4J_LINE.match(line) or line.startswith(("Traceback (", "Exception in thread ")):
            return False
        if line.startswith((" ", "\t", "Caused by: ", "Suppressed: ")):
            return True
        if self.spark_logger == "python":  # a traceback's last line: "BrokenPipeError: [Errno 32] ..."
            self.closed = not line.startswith("During handling of the above exception")
            return True
        return not self.trace and self.spark_logger != "jvm" and bool(JAVA_EXCEPTION.match(line))


def parse_header(line: str) -> JvmRecord:
    """The record a line that no record takes starts."""
    m = LOG4J_LINE.match(line)
    if m:
        return JvmRecord(LEVELS[m.group(1)], m.group(2), m.group(3), line)
    if line.startswith("Traceback ("):
        return JvmRecord(logging.ERROR, "python", line, line)
    if line.startswith("Exception in thread "):
        return JvmRecord(logging.ERROR, "java", line, line)
    return JvmRecord(logging.INFO, "jvm", line, line)


def _listed(record: JvmRecord, table: tuple[tuple[str | None, str], ...]) -> bool:
    text = record.text()
    return any(source in (None, record.spark_logger) and marker in text for source, marker in table)


def harmless_on_stop(record: JvmRecord) -> bool:
    """A record a stop of the bridge's query and session causes by itself, nothing gone wrong."""
    return _listed(record, STOP_CAUSED)


def harmless(record: JvmRecord) -> bool:
    """A record every start prints that asks nothing of anyone (:data:`HARMLESS`)."""
    return _listed(record, HARMLESS)


class JvmLog:
    """Reads the JVM's stderr pipe in a daemon thread and logs what it printed, record by record."""

    def __init__(self, fd: int) -> None:
        self._fd = fd  # the pipe's read end, closed here at its end
        self._stopping = threading.Event()
        self._pending: JvmRecord | None = None
        self.thread = threading.Thread(target=self._pump, name="spark-jvm-log", daemon=True)

    def start(self) -> JvmLog:
        self.thread.start()
        return self

    def stopping(self) -> None:
        """The bridge is stopping Spark: from now on, what the stop causes is kept out (at DEBUG)."""
        self._stopping.set()

    def feed(self, line: str) -> None:
        """Take one line the JVM printed; log the record it completes, if any."""
        if self._pending is not None and self._pending.takes(line):
            self._pending.trace.append(line)
            return
        self.flush()
        self._pending = parse_header(line)

    def flush(self) -> None:
        """Log the record read so far."""
        record, self._pending = self._pending, None
        if record is None:
            return
        level = record.level
        if harmless(record) or (self._stopping.is_set() and harmless_on_stop(record)):
            level = logging.DEBUG
        extra = fields(spark_logger=record.spark_logger, relayed=record.text())
        if record.trace:
            extra["fields"]["trace"] = "\n".join(record.trace)
        logger.log(level, "%s", record.message, extra=extra)

    def _pump(self) -> None:
        fd, buffer = self._fd, b""
        while True:
            wait = FLUSH_AFTER if self._pending is not None else None  # idle: sleep until the JVM prints
            readable, _, _ = select.select([fd], [], [], wait)
            if not readable:
                self.flush()
                continue
            chunk = os.read(fd, 65536)
            if not chunk:  # the JVM (and every worker it forked) closed its stderr
                if buffer:
                    self.feed(buffer.decode(errors="replace"))
                self.flush()
                os.close(fd)
                return
            *lines, buffer = (buffer + chunk).split(b"\n")
            for line in lines:
                self.feed(line.decode(errors="replace").rstrip("\r"))
