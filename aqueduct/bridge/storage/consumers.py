"""Named consumers of one log: who reads it, who drives acks, how far to truncate.

Several Spark queries may read one log (the pub-sub seed's subscribers).
Each is a *consumer* with a name (the source's ``consumer`` option) and its
own committed position per stream. Two frontiers follow from them:

- the **ack frontier**, per stream the minimum over the *ack consumers*:
  a producer hears that a record is safe only once every query whose sink
  counts (by default the receiver's own queries) committed it;
- the **truncation frontier**, never above the ack frontier and never above
  any registered consumer's position: the log keeps what a slow reader has
  not read yet (and what ``retention`` asks it to keep on top of that).

The registry lives in the log directory (``consumers/<name>.json``) so that
a query in another Spark application, the bridge and ``aqueduct-bridge
consumers`` all see the same list. A consumer that is gone must not pin the
log forever: it can be dropped by hand, or automatically once it falls more
than ``max_consumer_lag`` records behind. A dropped consumer no longer pins
anything, and its query fails with the data-loss error the next time it
plans a batch instead of silently skipping what was truncated.

A consumer may read only some streams (the source's ``streams`` or
``streamPattern``, like the Kafka source's ``subscribe`` and
``subscribePattern``): it then neither pins nor acks the others. A stream no
ack consumer reads is never acked, so its producers stall at ``max_lag``:
make sure some query that drives acks reads every stream.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from aqueduct.bridge.storage.index import write_atomically

CONSUMERS_DIR = "consumers"

#: The consumer name of ``aqueduct-bridge serve``'s own query (and of a
#: source with no ``consumer`` option), kept from before consumers had names.
DEFAULT_CONSUMER = "default"


class ConsumerError(ValueError):
    """A consumer name is invalid, or the consumer is unknown or dropped."""


def check_consumer_name(name: str) -> str:
    """Return ``name`` if it is usable as a file name on every platform, else raise."""
    if not name or len(name) > 128 or not name.replace("-", "").replace("_", "").isalnum():
        raise ConsumerError(
            f"consumer name must be 1-128 letters, digits, '-' or '_', got {name!r}"
        )
    return name


@dataclass(frozen=True)
class StreamSelection:
    """Which streams a consumer reads: all, the listed ids, or those whose name matches.

    ``pattern`` is a Python regular expression that must match the whole
    stream name; streams created later join when they match.
    """

    ids: frozenset[int] | None = None
    pattern: str | None = None

    @classmethod
    def parse(cls, streams: str | None, pattern: str | None) -> StreamSelection:
        """From the source options ``streams`` ("1,2,7") and ``streamPattern``."""
        if streams is not None and pattern is not None:
            raise ConsumerError("streams and streamPattern exclude each other: give one")
        if streams is not None:
            parts = [p.strip() for p in streams.split(",")]
            if not parts or not all(p.isdigit() for p in parts):
                raise ConsumerError(
                    f"streams must be stream ids separated by commas, e.g. '1,2,7', got {streams!r}"
                )
            return cls(ids=frozenset(int(p) for p in parts))
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ConsumerError(f"streamPattern {pattern!r} is not a regular expression: {e}") from None
            return cls(pattern=pattern)
        return cls()

    def selects(self, stream_id: int, stream_name: str) -> bool:
        if self.ids is not None:
            return stream_id in self.ids
        if self.pattern is not None:
            return re.fullmatch(self.pattern, stream_name) is not None
        return True

    def to_json(self) -> dict | None:
        if self.ids is not None:
            return {"streams": sorted(self.ids)}
        if self.pattern is not None:
            return {"pattern": self.pattern}
        return None

    @classmethod
    def from_json(cls, d: dict | None) -> StreamSelection:
        if not d:
            return cls()
        if "streams" in d:
            return cls(ids=frozenset(int(i) for i in d["streams"]))
        return cls(pattern=str(d["pattern"]))


ALL_STREAMS = StreamSelection()


@dataclass(frozen=True)
class Consumer:
    """One registered reader of the log.

    ``start`` is where it began (per stream; streams missing from it start
    at 0); it pins the log until the consumer commits for the first time.
    """

    name: str
    acks: bool = False  # do its commits drive producer acks?
    start: Mapping[int, int] = field(default_factory=dict)
    registered_at: float = 0.0
    dropped: str | None = None  # why it was dropped; None while it is live
    reads: StreamSelection = ALL_STREAMS

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "name": self.name,
                "acks": self.acks,
                "start": {str(s): p for s, p in sorted(self.start.items())},
                "registered_at": self.registered_at,
                "dropped": self.dropped,
                "reads": self.reads.to_json(),
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Consumer:
        d = json.loads(data)
        return cls(
            name=d["name"],
            acks=bool(d["acks"]),
            start={int(s): int(p) for s, p in d["start"].items()},
            registered_at=float(d["registered_at"]),
            dropped=d["dropped"],
            reads=StreamSelection.from_json(d.get("reads")),
        )


def consumer_file(log: Path, name: str) -> Path:
    return log / CONSUMERS_DIR / f"{check_consumer_name(name)}.json"


def load_consumers(log: Path) -> dict[str, Consumer]:
    """Every registered consumer of the log at ``log``, dropped ones included."""
    root = log / CONSUMERS_DIR
    if not root.is_dir():
        return {}
    consumers = {}
    for path in sorted(root.glob("*.json")):
        try:
            c = Consumer.from_json(path.read_bytes())
        except FileNotFoundError:  # removed while we listed
            continue
        consumers[c.name] = c
    return consumers


def save_consumer(log: Path, consumer: Consumer) -> None:
    """Write (or replace) one consumer's registry entry atomically."""
    path = consumer_file(log, consumer.name)
    path.parent.mkdir(exist_ok=True)
    write_atomically(path, consumer.to_json())


def register_consumer(
    log: Path,
    name: str,
    start: Mapping[int, int],
    *,
    acks: bool = False,
    reads: StreamSelection = ALL_STREAMS,
    now: float | None = None,
) -> Consumer:
    """Register ``name`` starting at ``start`` unless it is already live.

    A live entry is kept as it is (a restarted query resumes from its
    checkpoint, not from ``start``) except that ``acks=True`` is added to
    it and ``reads`` replaces what it read (a query restarted with another
    stream filter); a dropped one is replaced: a new query under that name
    begins anew.
    """
    existing = load_consumers(log).get(check_consumer_name(name))
    if existing is not None and existing.dropped is None:
        updated = replace(existing, acks=existing.acks or acks, reads=reads)
        if updated != existing:
            save_consumer(log, updated)
        return updated
    consumer = Consumer(name, acks, dict(start), time.time() if now is None else now, reads=reads)
    save_consumer(log, consumer)
    return consumer


def drop_consumer(log: Path, name: str, reason: str) -> Consumer:
    """Mark ``name`` dropped: it stops pinning the log, and its query fails on its next batch."""
    consumer = load_consumers(log).get(check_consumer_name(name))
    if consumer is None:
        raise ConsumerError(f"no consumer named {name!r} in {log}")
    if consumer.dropped is None:
        consumer = replace(consumer, dropped=reason)
        save_consumer(log, consumer)
    return consumer


def check_not_dropped(log: Path, name: str) -> None:
    """Raise :class:`ConsumerError` if ``name`` was dropped (the source calls this)."""
    consumer = load_consumers(log).get(name)
    if consumer is not None and consumer.dropped is not None:
        raise ConsumerError(
            f"consumer {name!r} was dropped ({consumer.dropped}); the log no longer keeps "
            "its records. Start the query again with a new checkpoint (it then registers "
            "anew) or under another consumer name"
        )


# ---------------------------------------------------------------- policy


def position(consumer: Consumer, committed: Mapping[int, int], stream_id: int) -> int:
    """How far ``consumer`` got in a stream: its last commit, else where it started."""
    return max(committed.get(stream_id, 0), consumer.start.get(stream_id, 0))


@dataclass(frozen=True)
class Frontiers:
    """Per stream: what may be acked, and below what the log may be truncated."""

    acks: dict[int, int]
    truncate: dict[int, int]


def frontiers(
    consumers: Mapping[str, Consumer],
    committed: Mapping[str, Mapping[int, int]],
    streams: Mapping[int, str],
) -> Frontiers:
    """Apply the rule of the module docstring to every stream in ``streams`` (id -> name).

    With no live ack consumer nothing is acked and nothing truncated: the
    log then only grows until a query that drives acks registers. A stream
    is acked (and truncated) only when some live ack consumer reads it.
    """
    live = [c for c in consumers.values() if c.dropped is None]
    if not any(c.acks for c in live):
        return Frontiers({}, {})
    acks: dict[int, int] = {}
    truncate: dict[int, int] = {}
    for sid, name in streams.items():
        readers = [c for c in live if c.reads.selects(sid, name)]
        ackers = [c for c in readers if c.acks]
        if not ackers:
            continue
        acks[sid] = min(position(c, committed.get(c.name, {}), sid) for c in ackers)
        truncate[sid] = min(position(c, committed.get(c.name, {}), sid) for c in readers)
    return Frontiers(acks, truncate)


def lagging(
    consumers: Mapping[str, Consumer],
    committed: Mapping[str, Mapping[int, int]],
    complete: Mapping[int, int],
    max_lag: int,
    names: Mapping[int, str],
) -> dict[str, int]:
    """Live consumers that do not drive acks and are more than ``max_lag`` records behind.

    Only the streams a consumer reads count (``names``: stream id -> name).
    Ack consumers are never dropped this way: they already hold producers
    back through the credit tap (``max_lag`` of the ingest).
    """
    behind = {}
    for c in consumers.values():
        if c.dropped is not None or c.acks:
            continue
        mine = committed.get(c.name, {})
        lag = sum(
            max(0, end - position(c, mine, sid))
            for sid, end in complete.items()
            if c.reads.selects(sid, names.get(sid, ""))
        )
        if lag > max_lag:
            behind[c.name] = lag
    return behind
