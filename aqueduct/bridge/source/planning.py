"""Input partitions for a micro-batch or a batch read: sized by data volume, not stream count.

A batch holds ``[start, end)`` of many streams. One Spark task per stream
range would make a thousand tasks (and, with a file sink, a thousand files)
for a thousand streams of a few records each, and one task for a stream
with ten million records. So ranges are first cut into pieces of at most
``max_records`` records and ``max_bytes`` bytes (bytes as the log stores
them), then consecutive pieces are packed into partitions up to the same
targets. ``min_partitions`` lowers the targets so that a batch with enough
records gets at least that many partitions (parallelism on a cluster).

Planning is deterministic: streams in id order, pieces in offset order,
the same offsets always give the same partitions and so the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from aqueduct.bridge.source.admission import StoredBytes
from aqueduct.bridge.storage.index import IndexEntry
from aqueduct.bridge.storage.offset import StreamKey
from aqueduct.bridge.storage.view import StreamIndex

#: Default targets of one input partition.
PARTITION_RECORDS = 1 << 20
PARTITION_BYTES = 128 << 20


@dataclass(frozen=True)
class Slice:
    """Records ``[start, end)`` of one stream, with the index entries that hold them."""

    directory: str
    key: StreamKey  # the stream's id, or (log name, id) in a query over several logs
    start: int
    end: int
    entries: tuple[IndexEntry, ...]
    bytes: int


def plan_slices(
    streams: Mapping[StreamKey, StreamIndex],
    starts: Mapping[StreamKey, int],
    ends: Mapping[StreamKey, int],
    *,
    max_records: int = PARTITION_RECORDS,
    max_bytes: int = PARTITION_BYTES,
    min_partitions: int | None = None,
) -> list[tuple[Slice, ...]]:
    """The partitions of records ``[starts[s], ends[s])`` of every stream, as groups of slices."""
    ranges = [(sid, starts.get(sid, 0), stop) for sid, stop in sorted(ends.items()) if stop > starts.get(sid, 0)]
    if not ranges:
        return []
    sizes = {sid: StoredBytes([(e.first_offset, e.count, e.length) for e in streams[sid].entries_between(lo, stop)])
             for sid, lo, stop in ranges}  # fmt: skip
    if min_partitions is not None:
        total_records = sum(stop - lo for _, lo, stop in ranges)
        total_bytes = sum(sizes[sid].cost(lo, stop) for sid, lo, stop in ranges)
        max_records = max(1, min(max_records, total_records // min_partitions))
        max_bytes = max(1, min(max_bytes, math.ceil(total_bytes / min_partitions)))
    pieces: list[Slice] = []
    for sid, lo, stop in ranges:
        s = streams[sid]
        size = sizes[sid].cost(lo, stop)
        n = max(math.ceil((stop - lo) / max_records), math.ceil(size / max_bytes), 1)
        n = min(n, stop - lo)
        cuts = [lo + (stop - lo) * i // n for i in range(n + 1)]
        for a, b in zip(cuts, cuts[1:], strict=False):
            entries = tuple(s.entries_between(a, b))
            pieces.append(Slice(str(s.directory), sid, a, b, entries, sizes[sid].cost(a, b)))
    parts: list[tuple[Slice, ...]] = []
    current: list[Slice] = []
    records = size = 0
    for piece in pieces:
        n = piece.end - piece.start
        if current and (records + n > max_records or size + piece.bytes > max_bytes):
            parts.append(tuple(current))
            current, records, size = [], 0, 0
        current.append(piece)
        records += n
        size += piece.bytes
    parts.append(tuple(current))
    return parts
