"""The bridge's two log formats: what a person reads and what a log shipper parses."""

from __future__ import annotations

import json
import logging

import pytest

from aqueduct.bridge.ingest.latency import Histogram
from aqueduct.logs import JsonFormatter, TextFormatter, configure_logging, fields


def _record(level: int, message: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("aqueduct.bridge.ingest.service", level, __file__, 1, message, args, None)
    record.__dict__.update(extra)
    return record


def test_text_lines_name_the_level_from_warning_up() -> None:
    text = TextFormatter()
    assert text.format(_record(logging.INFO, "listening on %s", "TCP 0.0.0.0:1")) == (
        "aqueduct-bridge: listening on TCP 0.0.0.0:1"
    )
    assert text.format(_record(logging.WARNING, "refused a/b from tcp h:1: bad cookie")) == (
        "aqueduct-bridge: warning: refused a/b from tcp h:1: bad cookie"
    )


def test_json_lines_carry_the_fields_beside_the_message() -> None:
    line = JsonFormatter().format(
        _record(logging.WARNING, "refused %s: %s", "a/b", "bad cookie",
                **fields(event="session_refused", kind="bad_cookie", connector="a/b"))
    )  # fmt: skip
    doc = json.loads(line)
    assert doc.pop("time").endswith("+00:00")
    assert doc == {
        "level": "WARNING", "logger": "aqueduct.bridge.ingest.service", "message": "refused a/b: bad cookie",
        "event": "session_refused", "kind": "bad_cookie", "connector": "a/b",
    }  # fmt: skip


def test_an_unknown_log_format_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^log format must be one of \('text', 'json'\), got 'xml'$"):
        configure_logging("xml")


def test_py4j_tracebacks_of_calls_the_jvm_end_cut_off_are_dropped_and_other_errors_kept() -> None:
    """A JVM that ended first leaves py4j's two chained tracebacks; the bridge's own line says it instead."""
    import io

    from py4j.protocol import Py4JNetworkError

    out, root = io.StringIO(), logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        configure_logging("text", out)
        for error in (Py4JNetworkError("Error while sending or receiving"), ValueError("a real bug")):
            try:
                raise error
            except Exception:
                logging.exception("Exception while sending command.")  # as py4j logs it: the root logger
        logging.getLogger("aqueduct.bridge").warning("Spark's JVM ended by SIGTERM (exit status 143): stopping")
    finally:
        for h in root.handlers[len(handlers):]:
            root.removeHandler(h)
        root.setLevel(level)
    text = out.getvalue()
    assert text.count("Exception while sending command.") == 1 and "ValueError: a real bug" in text
    assert "Py4JNetworkError" not in text and "Spark's JVM ended by SIGTERM" in text


def test_histogram_buckets_are_cumulative_with_inf_last() -> None:
    h = Histogram(bounds=(0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.005, 3.0):
        h.observe(seconds)
    assert h.cumulative() == [("0.001", 2), ("0.01", 3), ("+Inf", 4)]
    assert h.observations == 4 and h.total == pytest.approx(3.0065)
