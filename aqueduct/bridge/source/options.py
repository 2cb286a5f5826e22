"""The options of the ``aqueduct`` source, each validated with a clear error.

Spark hands a data source its options as a case-insensitive map of
strings; :meth:`SourceOptions.parse` turns them into typed values once, so
a typo or a bad value fails when the query is defined (with the option's
name and rule in the message), never halfway through a stream. The names
follow Spark's Kafka source where the idea is the same, and the Kafka
source's own names are taken too where they mean the same thing
(:data:`KAFKA_ALIASES`); a Kafka option with no meaning here says why
(:data:`KAFKA_ONLY`), and any other unknown name gets a "did you mean".
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from aqueduct.bridge.source.bridge_list import BridgeListError, read_bridge_list, split_address
from aqueduct.bridge.storage.consumers import (
    ALL_STREAMS,
    DEFAULT_CONSUMER,
    ConsumerError,
    StreamSelection,
    check_consumer_name,
)
from aqueduct.bridge.storage.offset import StreamKey, key_shape, parse_key
from aqueduct.bridge.storage.view import check_log_dir

EARLIEST, LATEST = -2, -1  # per-stream markers in startingOffsets / endingOffsets, as in Kafka's

#: Every option, as users spell it (Spark lower-cases them on the way in).
OPTIONS = (
    "log",
    "bridge",
    "bridgeTokenFile",
    "bridgeTokenEnv",
    "bridgeCA",
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
    "idleWait",
    "failover",
    "bridgeList",
    "bridgeTimeout",
    "bridgeConnectTimeout",
)

#: Seconds a bridge's calls may fail before a failover query plans without it.
DEFAULT_BRIDGE_TIMEOUT = 10.0
#: Seconds connecting to a bridge may take (failover): what a partitioned host costs a trigger.
DEFAULT_BRIDGE_CONNECT_TIMEOUT = 2.0
#: Options a failover query refuses: their budgets count log offsets, which differ between bridges.
NOT_WITH_FAILOVER = ("maxRecordsPerTrigger", "maxBytesPerTrigger", "minRecordsPerTrigger", "maxTriggerDelay")

#: The Kafka source's names for options that mean the same here (offsets are records).
KAFKA_ALIASES = {
    "maxOffsetsPerTrigger": "maxRecordsPerTrigger",
    "minOffsetsPerTrigger": "minRecordsPerTrigger",
    "subscribePattern": "streamPattern",
}

_BY_TIMESTAMP = "not supported: the aqueduct source starts and ends at offsets (startingOffsets, endingOffsets)"
_CONSUMER = "a query's place in the log is its named consumer: option consumer"
#: Kafka source options that have no meaning for a log directory, and what to use instead.
KAFKA_ONLY = {
    "kafka.bootstrap.servers": "the aqueduct source reads a log directory: option log",
    "subscribe": "streams are chosen by id (option streams) or by name (option streamPattern)",
    "assign": "streams are chosen by id (option streams) or by name (option streamPattern)",
    "startingTimestamp": _BY_TIMESTAMP,
    "startingOffsetsByTimestamp": _BY_TIMESTAMP,
    "startingOffsetsByTimestampStrategy": _BY_TIMESTAMP,
    "endingTimestamp": _BY_TIMESTAMP,
    "endingOffsetsByTimestamp": _BY_TIMESTAMP,
    "groupIdPrefix": _CONSUMER,
    "kafka.group.id": _CONSUMER,
    "includeHeaders": "records have no headers (their key and event_time are columns)",
    "kafkaConsumer.pollTimeoutMs": "the log is read from local files: there is no polling to tune",
    "fetchOffset.numRetries": "the log is read from local files: there is no offset fetching to tune",
    "fetchOffset.retryIntervalMs": "the log is read from local files: there is no offset fetching to tune",
}

#: Kafka's default maxTriggerDelay: a batch below minRecordsPerTrigger runs after this anyway.
DEFAULT_MAX_TRIGGER_DELAY = 15 * 60.0

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


class AqueductOptionError(ValueError):
    """An option of the ``aqueduct`` source is missing or invalid."""


_LOG_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _named(text: str, option: str) -> tuple[tuple[str | None, str], ...]:
    """``log``: one directory, or several as ``name=DIR,name=DIR`` (or ``DIR,DIR``: named by basename).

    ``bridge`` alike with ``HOST:PORT``, except that several bridges must be named.
    """
    what = "DIR" if option == "log" else "HOST:PORT"
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 1 and "=" not in parts[0]:
        return ((None, parts[0]),)
    named: list[tuple[str | None, str]] = []
    for part in parts:
        name, sep, value = part.partition("=")
        if not sep and option == "bridge":
            raise AqueductOptionError(
                f"aqueduct source: several bridges need names (bridge=NAME=HOST:PORT,NAME=HOST:PORT), got {part!r}"
            )
        if not sep:
            name, value = Path(part).name, part
        if not _LOG_NAME.fullmatch(name) or not value:
            raise AqueductOptionError(
                f"aqueduct source: {option} names must be 1-64 letters, digits, '-' or '_' "
                f"({option}=NAME={what},NAME={what}), got {part!r}"
            )
        named.append((name, value))
    return tuple(named)


def _sources(log: str, bridge: str) -> tuple[tuple[str | None, str, str], ...]:
    """``(name, "log" or "bridge", directory or HOST:PORT)`` of every log a query reads."""
    sources = [(n, "log", v) for n, v in (_named(log, "log") if log else ())]
    sources += [(n, "bridge", v) for n, v in (_named(bridge, "bridge") if bridge else ())]
    if len(sources) > 1 and any(n is None for n, _, _ in sources):
        raise AqueductOptionError(
            "aqueduct source: reading logs and bridges together, name each: log=NAME=DIR, bridge=NAME=HOST:PORT"
        )
    names = [n for n, _, _ in sources]
    if len(set(names)) != len(names):
        raise AqueductOptionError(
            f"aqueduct source: two logs named alike in {', '.join(filter(None, (log, bridge)))!r}; "
            "name them: log=eu=DIR,us=DIR"
        )
    return tuple(sources)


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of the ``aqueduct`` source (see docs/bridge.md for the table)."""

    log: str  # as given: one directory, or several (see :func:`_named`); "" when none
    consumer: str = DEFAULT_CONSUMER
    #: "earliest", "latest", or {stream id: offset, EARLIEST or LATEST}
    starting_offsets: str | Mapping[StreamKey, int] = "earliest"
    #: "latest" or {stream id: offset or LATEST} (batch reads only)
    ending_offsets: str | Mapping[StreamKey, int] = "latest"
    fail_on_data_loss: bool = True
    max_records_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    min_records_per_trigger: int | None = None
    max_trigger_delay: float = DEFAULT_MAX_TRIGGER_DELAY  # seconds
    reads: StreamSelection = ALL_STREAMS
    min_partitions: int | None = None
    idle_wait: float = 0.0  # seconds latestOffset may wait for new data when there is none
    given: frozenset[str] = frozenset()  # the option names the user set, lower-cased
    bridge: str = ""  # as given: one HOST:PORT, or several NAME=HOST:PORT (see :func:`_named`)
    #: where the driver finds the bridges' credential and CA: file paths or a variable's name,
    #: never the secret itself (options show in plans)
    bridge_token_file: str | None = None
    bridge_token_env: str | None = None
    bridge_ca: str | None = None
    #: one stream across bridges (docs/source.md "Failover"): offsets in points of reference per stream id
    failover: bool = False
    bridge_list: str | None = None  # a file on the driver naming bridges, re-read at every trigger
    bridge_timeout: float = DEFAULT_BRIDGE_TIMEOUT  # seconds a failing bridge holds its streams back
    bridge_connect_timeout: float = DEFAULT_BRIDGE_CONNECT_TIMEOUT  # seconds connecting to a bridge may take

    @property
    def sources(self) -> tuple[tuple[str | None, str, str], ...]:
        """``(name, "log" or "bridge", where)`` of each log read; the name is None when there is one."""
        return _sources(self.log, self.bridge)

    @property
    def logs(self) -> tuple[tuple[str | None, str], ...]:
        """``(name, directory)`` of each log read from its files."""
        return tuple((n, v) for n, kind, v in self.sources if kind == "log")

    @property
    def bridges(self) -> tuple[tuple[str | None, str], ...]:
        """``(name, HOST:PORT)`` of each log read from a bridge's Flight server."""
        return tuple((n, v) for n, kind, v in self.sources if kind == "bridge")

    @property
    def qualified(self) -> bool:
        """Several logs read apart (not failover): stream keys carry the log's name."""
        return len(self.sources) > 1 and not self.failover

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Validate Spark's (case-insensitive) option map."""
        opts = _canonical(options)
        log, bridge, bridge_list = opts.get("log", ""), opts.get("bridge", ""), opts.get("bridgelist")
        if not log and not bridge and not bridge_list:
            raise AqueductOptionError(
                "aqueduct source: option 'log' (the log directory) or 'bridge' (HOST:PORT of a "
                "bridge's log server) is required"
            )
        failover = _failover(opts, bridge_list)
        sources = _sources(log, bridge)
        if bridge_list is not None:
            _check_list_names(bridge_list, sources)
        for _, kind, where in sources:
            try:
                check_log_dir(Path(where)) if kind == "log" else split_address(where)
            except ValueError as e:
                raise AqueductOptionError(f"aqueduct source: {e}") from None
        if not bridge and not bridge_list:
            given = [n for n in OPTIONS[2:5] if n.lower() in opts]
            if given:
                raise AqueductOptionError(f"aqueduct source: {', '.join(given)} only apply with option 'bridge'")
        qualified = len(sources) > 1 and not failover
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
            starting_offsets=_offsets_option(opts, "startingOffsets", qualified, allow_earliest=True),
            ending_offsets=_offsets_option(opts, "endingOffsets", qualified, allow_earliest=False),
            fail_on_data_loss=_boolean(opts, "failOnDataLoss", default=True),
            max_records_per_trigger=_positive_int(opts, "maxRecordsPerTrigger"),
            max_bytes_per_trigger=_positive_int(opts, "maxBytesPerTrigger"),
            min_records_per_trigger=min_records,
            max_trigger_delay=_duration(opts, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY),
            reads=reads,
            min_partitions=_positive_int(opts, "minPartitions"),
            idle_wait=_duration(opts, "idleWait", 0.0),
            given=frozenset(opts),
            bridge=bridge,
            bridge_token_file=opts.get("bridgetokenfile"),
            bridge_token_env=opts.get("bridgetokenenv"),
            bridge_ca=opts.get("bridgeca"),
            failover=failover,
            bridge_list=bridge_list,
            bridge_timeout=_bridge_timeout(opts, failover, "bridgeTimeout", DEFAULT_BRIDGE_TIMEOUT),
            bridge_connect_timeout=_bridge_timeout(
                opts, failover, "bridgeConnectTimeout", DEFAULT_BRIDGE_CONNECT_TIMEOUT
            ),
        )


def _failover(opts: Mapping[str, str], bridge_list: str | None) -> bool:
    """``failover`` (``bridgeList`` implies it), checked against the options it cannot go with."""
    if bridge_list is not None and opts.get("failover", "true").strip().lower() == "false":
        raise AqueductOptionError("aqueduct source: bridgeList implies failover; remove failover=false")
    failover = _boolean(opts, "failover", default=bridge_list is not None)
    if failover:
        refused = [n for n in NOT_WITH_FAILOVER if n.lower() in opts]
        if refused:
            raise AqueductOptionError(
                f"aqueduct source: {', '.join(refused)} not supported with failover (budgets count log "
                "offsets, which differ between bridges); every trigger reads all complete epochs"
            )
    if bridge_list is not None:
        try:
            read_bridge_list(bridge_list)
        except BridgeListError as e:
            raise AqueductOptionError(f"aqueduct source: {e}") from None
    return failover


def _check_list_names(bridge_list: str, sources: tuple[tuple[str | None, str, str], ...]) -> None:
    """A bridge list names no log the ``log``/``bridge`` options name too (they are the query's fixed ones)."""
    fixed = {name or where for name, _, where in sources}
    both = sorted(e.name for e in read_bridge_list(bridge_list) if e.name in fixed)
    if both:
        raise AqueductOptionError(
            f"aqueduct source: bridge list {bridge_list!r} names {', '.join(both)}, also named by option log or bridge"
        )


def _bridge_timeout(opts: Mapping[str, str], failover: bool, name: str, default: float) -> float:
    """``bridgeTimeout`` or ``bridgeConnectTimeout``: a positive duration, given only with failover."""
    if name.lower() in opts and not failover:
        raise AqueductOptionError(f"aqueduct source: {name} only applies with failover=true (or bridgeList)")
    timeout = _duration(opts, name, default)
    if timeout <= 0:
        raise AqueductOptionError(f"aqueduct source: {name} must be a positive duration, got {opts[name.lower()]!r}")
    return timeout


def _canonical(options: Mapping[str, str]) -> dict[str, str]:
    """The options under their own lower-cased names, Kafka's aliases resolved; unknown names refused.

    An unknown name is refused with the reason when it is a Kafka option
    that means nothing here, else with the nearest known names (difflib's
    ratio, which catches typos and case-insensitive near misses).
    """
    known = {name.lower(): name for name in OPTIONS}
    aliases = {alias.lower(): name.lower() for alias, name in KAFKA_ALIASES.items()}
    kafka_only = {name.lower(): (name, why) for name, why in KAFKA_ONLY.items()}
    opts: dict[str, str] = {}
    spelled: dict[str, str] = {}  # canonical lower-case name -> as the user wrote it
    for given, value in options.items():
        key = given.lower()
        if key in kafka_only:
            name, why = kafka_only[key]
            raise AqueductOptionError(f"aqueduct source: option {name} (Kafka's) does not apply: {why}")
        if key.startswith("kafka."):
            raise AqueductOptionError(
                f"aqueduct source: option {given} (a Kafka client setting) does not apply: "
                "the aqueduct source reads a log directory, option log"
            )
        canonical = aliases.get(key, key)
        if canonical not in known:
            raise AqueductOptionError(f"aqueduct source: unknown option {given!r}{_did_you_mean(key)}")
        if canonical in spelled:
            raise AqueductOptionError(
                f"aqueduct source: {spelled[canonical]} and {given} are the same option; give one"
            )
        opts[canonical], spelled[canonical] = value, given
    return opts


def _did_you_mean(key: str) -> str:
    """``"; did you mean 'X'?"`` with the closest option name (Kafka's aliases included), else the list."""
    by_lower = {n.lower(): n for n in [*OPTIONS, *KAFKA_ALIASES]}
    close = difflib.get_close_matches(key, by_lower, n=1, cutoff=0.6)
    if not close:
        return f"; known: {', '.join(OPTIONS)}"
    return f"; did you mean {by_lower[close[0]]!r}?"


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


def _offsets_option(
    opts: Mapping[str, str], name: str, qualified: bool, *, allow_earliest: bool
) -> str | dict[StreamKey, int]:
    """``earliest`` / ``latest`` or a JSON object ``{"<stream key>": offset, -2 or -1}``."""
    words = ("earliest", "latest") if allow_earliest else ("latest",)
    default = words[0]
    text = opts.get(name.lower(), default)
    if text in words:
        return text
    lowest = EARLIEST if allow_earliest else LATEST
    markers = "-2 (earliest) or -1 (latest)" if allow_earliest else "-1 (latest)"
    key = key_shape(qualified)
    problem = (
        f"aqueduct source: {name} must be {', '.join(repr(w) for w in words)} or a JSON object "
        f'{{"{key}": <offset>, {markers}}}, got {text!r}'
    )
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError(doc)
        parsed = {parse_key(k, qualified): v for k, v in doc.items()}
    except ValueError:
        raise AqueductOptionError(problem) from None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= lowest for v in parsed.values()):
        raise AqueductOptionError(problem)
    return parsed
