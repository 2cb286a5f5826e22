"""Log output of the commands (``aqueduct-bridge serve``): plain lines for people, JSON lines for shippers.

The bridge says everything through :mod:`logging` (loggers under
``aqueduct``); a record may carry structured fields as
``extra={"fields": {...}}`` (``event``, ``connector``, ``remote``,
``reason`` ...), which the JSON form puts beside the message so a log
shipper can filter on them without parsing text. The text form is what
the bridge always printed: ``aqueduct-bridge: MESSAGE`` (``aqueduct-bridge:
warning: MESSAGE`` from WARNING up); a record relaying another program's
output (field ``relayed``: Spark's JVM, :mod:`aqueduct.bridge.app.jvm_log`)
is printed as that program printed it, and its JSON form leaves that copy
out. A :class:`~aqueduct.bridge.app.spark_bridge.SparkBridge`
leaves logging to the application it runs in.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

FORMATS = ("text", "json")


def fields(**values: Any) -> dict[str, Any]:
    """``extra=`` of a log call carrying structured fields (``logger.info(msg, extra=fields(event=...))``)."""
    return {"fields": values}


class TextFormatter(logging.Formatter):
    """``aqueduct-bridge: message``, the level named from WARNING up."""

    def format(self, record: logging.LogRecord) -> str:
        relayed = getattr(record, "fields", {}).get("relayed")
        if relayed is not None:  # another program's output (Spark's JVM), as that program printed it
            return str(relayed)
        level = f"{record.levelname.lower()}: " if record.levelno >= logging.WARNING else ""
        text = f"aqueduct-bridge: {level}{record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, then the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        doc.update((k, v) for k, v in getattr(record, "fields", {}).items() if k != "relayed")
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def cut_by_the_jvm_ending(record: logging.LogRecord) -> bool:
    """py4j's traceback of a call the JVM's end cut off (it logs it on the root logger).

    When Spark's JVM ends (a stop signal that reached it first, a crash),
    a py4j call in flight fails with ``Py4JNetworkError`` and py4j logs
    "Exception while sending command." with two chained tracebacks. The
    bridge says what happened in one line of its own ("Spark's JVM ended
    by ..."), so the traceback is noise an operator would take for a bug.
    Matched by the exception's class and module, so this module needs no
    py4j import.
    """
    error = record.exc_info[1] if record.exc_info else None
    kind = type(error)
    return kind.__name__ == "Py4JNetworkError" and kind.__module__.startswith("py4j")


def configure_logging(log_format: str = "text", stream: TextIO | None = None) -> None:
    """Send the bridge's INFO lines (and every library's warnings) to ``stream`` (stderr) in ``log_format``."""
    if log_format not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, got {log_format!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(lambda record: not cut_by_the_jvm_ending(record))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)  # py4j, aioquic ...: warnings only
    logging.getLogger("aqueduct").setLevel(logging.INFO)
