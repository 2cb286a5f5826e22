"""How far a consumer is behind a stream: records, bytes and the age of the oldest unread.

Everything here is read from the stream's index (no segment is opened):
records are offsets, bytes are what the log stores for them
(:class:`~aqueduct.bridge.source.admission.StoredBytes`), and an unread record's
age is the time since the group commit that made it durable (the index
entry's ``written_at_us``), which is when Spark could first have read it.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass

from aqueduct.bridge.source.admission import StoredBytes
from aqueduct.bridge.storage.view import StreamIndex


def stored_bytes(s: StreamIndex) -> StoredBytes:
    """The byte measure of one stream, from its index entries."""
    return StoredBytes([(e.first_offset, e.count, e.length) for e in s.entries])


@dataclass(frozen=True)
class StreamLag:
    """What one consumer has not committed of one stream's complete epochs."""

    stream_id: int
    records: int
    bytes: int
    oldest_unread_us: int | None  # when the oldest of them became durable; None if none


def stream_lag(s: StreamIndex, position: int) -> StreamLag:
    """Lag of a consumer at ``position`` (its committed offset) in stream ``s``."""
    start = max(position, s.earliest)
    if start >= s.complete:
        return StreamLag(s.stream_id, 0, 0, None)
    k = bisect.bisect_right(s.entries, start, key=lambda e: e.first_offset) - 1
    return StreamLag(
        s.stream_id,
        s.complete - start,
        stored_bytes(s).cost(start, s.complete),
        s.entries[k].written_at_us,
    )


@dataclass(frozen=True)
class Lag:
    """A consumer's lag over every stream: totals, the worst stream, the oldest unread record."""

    records: int
    bytes: int
    streams_behind: int
    worst: StreamLag | None  # the stream with the most records behind
    oldest_unread_age_s: float | None

    def to_json(self) -> dict:
        worst = self.worst
        return {
            "lag_records": self.records,
            "lag_bytes": self.bytes,
            "streams_behind": self.streams_behind,
            "worst_stream": None
            if worst is None
            else {"stream_id": worst.stream_id, "records": worst.records, "bytes": worst.bytes},
            "oldest_unread_age_s": self.oldest_unread_age_s,
        }


def consumer_lag(streams: Mapping[int, StreamIndex], positions: Mapping[int, int], now_s: float) -> Lag:
    """Sum the per-stream lags of a consumer whose committed offsets are ``positions``."""
    lags = [stream_lag(s, positions.get(sid, 0)) for sid, s in streams.items()]
    behind = [x for x in lags if x.records]
    oldest = min((x.oldest_unread_us for x in behind if x.oldest_unread_us is not None), default=None)
    return Lag(
        records=sum(x.records for x in behind),
        bytes=sum(x.bytes for x in behind),
        streams_behind=len(behind),
        worst=max(behind, key=lambda x: (x.records, -x.stream_id), default=None),
        oldest_unread_age_s=None if oldest is None else max(0.0, now_s - oldest / 1e6),
    )
