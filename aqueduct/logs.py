"""Log output of the commands (``aqueduct-bridge serve``): plain lines for people, JSON lines for shippers.

The bridge says everything through :mod:`logging` (loggers under
``aqueduct``); a record may carry structured fields as
``extra={"fields": {...}}`` (``event``, ``connector``, ``remote``,
``reason`` ...), which the JSON form puts beside the message so a log
shipper can filter on them without parsing text. The text form is what
the bridge always printed: ``aqueduct-bridge: MESSAGE`` (``aqueduct-bridge:
warning: MESSAGE`` from WARNING up). A :class:`~aqueduct.bridge.app.receiver.SparkBridge`
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
        doc.update(getattr(record, "fields", {}))
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def configure_logging(log_format: str = "text", stream: TextIO | None = None) -> None:
    """Send the bridge's INFO lines (and every library's warnings) to ``stream`` (stderr) in ``log_format``."""
    if log_format not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, got {log_format!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)  # py4j, aioquic ...: warnings only
    logging.getLogger("aqueduct").setLevel(logging.INFO)
