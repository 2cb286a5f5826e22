"""The options of the ``aqueduct`` source, each validated with a clear error.

Spark hands a data source its options as a case-insensitive map of
strings; :meth:`SourceOptions.parse` turns them into typed values once, so
a typo or a bad value fails when the query is defined (with the option's
name and rule in the message), never halfway through a stream. The names
follow Spark's Kafka source where the idea is the same.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from aqueduct.bridge.consumers import (
    ALL_STREAMS,
    DEFAULT_CONSUMER,
    ConsumerError,
    StreamSelection,
    check_consumer_name,
)
from aqueduct.bridge.view import check_log_dir

EARLIEST, LATEST = -2, -1  # per-stream markers in startingOffsets / endingOffsets, as in Kafka's

#: Every option, as users spell it (Spark lower-cases them on the way in).
OPTIONS = (
    "log",
    "consumer",
    "startingOffsets",
    "endingOffsets",
    "failOnDataLoss",
    "maxRecordsPerTrigger",
    "maxBytesPerTrigger",
    "minRecordsPerTrigger",
    "maxTriggerDelay",
    "streams",
    "streamPattern",
    "minPartitions",
)

#: Kafka's default maxTriggerDelay: a batch below minRecordsPerTrigger runs after this anyway.
DEFAULT_MAX_TRIGGER_DELAY = 15 * 60.0

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


class AqueductOptionError(ValueError):
    """An option of the ``aqueduct`` source is missing or invalid."""


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of the ``aqueduct`` source (see docs/bridge.md for the table)."""

    log: str
    consumer: str = DEFAULT_CONSUMER
    #: "earliest", "latest", or {stream id: offset, EARLIEST or LATEST}
    starting_offsets: str | Mapping[int, int] = "earliest"
    #: "latest" or {stream id: offset or LATEST} (batch reads only)
    ending_offsets: str | Mapping[int, int] = "latest"
    fail_on_data_loss: bool = True
    max_records_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    min_records_per_trigger: int | None = None
    max_trigger_delay: float = DEFAULT_MAX_TRIGGER_DELAY  # seconds
    reads: StreamSelection = ALL_STREAMS
    min_partitions: int | None = None
    given: frozenset[str] = frozenset()  # the option names the user set, lower-cased

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Validate Spark's (case-insensitive) option map."""
        known = {name.lower(): name for name in OPTIONS}
        unknown = sorted(k for k in options if k.lower() not in known)
        if unknown:
            raise AqueductOptionError(
                f"aqueduct source: unknown option(s) {', '.join(unknown)}; known: {', '.join(OPTIONS)}"
            )
        opts = {k.lower(): v for k, v in options.items()}
        log = opts.get("log")
        if not log:
            raise AqueductOptionError("aqueduct source: option 'log' (the log directory) is required")
        try:
            check_log_dir(Path(log))
        except ValueError as e:
            raise AqueductOptionError(f"aqueduct source: {e}") from None
        try:
            consumer = check_consumer_name(opts.get("consumer", DEFAULT_CONSUMER))
            reads = StreamSelection.parse(opts.get("streams"), opts.get("streampattern"))
        except ConsumerError as e:
            raise AqueductOptionError(f"aqueduct source: {e}") from None
        min_records = _positive_int(opts, "minRecordsPerTrigger")
        if "maxtriggerdelay" in opts and min_records is None:
            raise AqueductOptionError(
                "aqueduct source: maxTriggerDelay only applies with minRecordsPerTrigger"
            )
        return cls(
            log=log,
            consumer=consumer,
            starting_offsets=_offsets_option(opts, "startingOffsets", allow_earliest=True),
            ending_offsets=_offsets_option(opts, "endingOffsets", allow_earliest=False),
            fail_on_data_loss=_boolean(opts, "failOnDataLoss", default=True),
            max_records_per_trigger=_positive_int(opts, "maxRecordsPerTrigger"),
            max_bytes_per_trigger=_positive_int(opts, "maxBytesPerTrigger"),
            min_records_per_trigger=min_records,
            max_trigger_delay=_duration(opts, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY),
            reads=reads,
            min_partitions=_positive_int(opts, "minPartitions"),
            given=frozenset(opts),
        )


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    text = opts.get(name.lower())
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise AqueductOptionError(f"aqueduct source: {name} must be a positive integer, got {text!r}")
    return value


def _boolean(opts: Mapping[str, str], name: str, *, default: bool) -> bool:
    text = opts.get(name.lower())
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise AqueductOptionError(f"aqueduct source: {name} must be 'true' or 'false', got {text!r}")
    return text.strip().lower() == "true"


def _duration(opts: Mapping[str, str], name: str, default: float) -> float:
    """Spark's duration strings: ``500ms``, ``30s``, ``15m``, ``1h`` (a bare number is seconds)."""
    text = opts.get(name.lower())
    if text is None:
        return default
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|min|m|h)?\s*", text)
    if m is None:
        raise AqueductOptionError(
            f"aqueduct source: {name} must be a duration such as '500ms', '30s', '15m' or '1h', got {text!r}"
        )
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def _offsets_option(opts: Mapping[str, str], name: str, *, allow_earliest: bool) -> str | dict[int, int]:
    """``earliest`` / ``latest`` or a JSON object ``{"<stream id>": offset, -2 or -1}``."""
    words = ("earliest", "latest") if allow_earliest else ("latest",)
    default = words[0]
    text = opts.get(name.lower(), default)
    if text in words:
        return text
    lowest = EARLIEST if allow_earliest else LATEST
    markers = "-2 (earliest) or -1 (latest)" if allow_earliest else "-1 (latest)"
    problem = (
        f"aqueduct source: {name} must be {', '.join(repr(w) for w in words)} or a JSON object "
        f'{{"<stream id>": <offset>, {markers}}}, got {text!r}'
    )
    try:
        doc = json.loads(text)
    except ValueError:
        raise AqueductOptionError(problem) from None
    if not isinstance(doc, dict) or not all(
        isinstance(k, str) and k.isdigit() and isinstance(v, int) and not isinstance(v, bool) and v >= lowest
        for k, v in doc.items()
    ):
        raise AqueductOptionError(problem)
    return {int(k): v for k, v in doc.items()}
