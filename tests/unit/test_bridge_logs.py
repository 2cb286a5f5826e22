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


def test_histogram_buckets_are_cumulative_with_inf_last() -> None:
    h = Histogram(bounds=(0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.005, 3.0):
        h.observe(seconds)
    assert h.cumulative() == [("0.001", 2), ("0.01", 3), ("+Inf", 4)]
    assert h.observations == 4 and h.total == pytest.approx(3.0065)
