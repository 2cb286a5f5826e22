"""The ids a stream has received, rebuilt from its files: deduplication across restarts and truncation.

The log drops a stable id it already holds, and that must survive a
restart and the truncation of the segments that held it. On open the
received set is rebuilt from what the stream keeps (:func:`rebuilt_received`);
before truncation drops segments, the ids only they held that dedup still
needs are written to a small file beside the index (:func:`carry_received_ids`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

from aqueduct.bridge.storage.corruption import record_corrupt
from aqueduct.bridge.storage.index import IndexEntry, write_atomically
from aqueduct.bridge.storage.segment import BatchCorrupt
from aqueduct.bridge.storage.view import StreamIndex, StreamMeta
from aqueduct.wire.rangeset import RangeSet

logger = logging.getLogger(__name__)

#: Received-id ranges carried over from truncated segments (unordered streams).
CARRIED_FILE = "received.json"


def rebuilt_received(meta: StreamMeta, directory: Path, entries: list[IndexEntry]) -> RangeSet:
    """Ids below the oldest retained point of reference, ids carried over from
    truncated segments, and the retained stable ids."""
    received = RangeSet()
    if not entries:
        return received
    if entries[0].reference_before:
        received.add_range(0, entries[0].reference_before)
    for a, b in _carried(directory):
        received.add_range(a, b)
    for a, b in _received_ranges(StreamIndex(meta, directory, entries)):
        received.add_range(a, b)
    return received


def carry_received_ids(meta: StreamMeta, directory: Path, entries: list[IndexEntry], drop: set[int]) -> None:
    """Persist the stable ids of segments about to be dropped that dedup still needs.

    Ids below the first retained record's point of reference are
    implied by it; an unordered stream may also hold ids above it, and
    those must survive the segment. Written before the index changes,
    so a crash in between only leaves ids that are still stored anyway.
    """
    floor = next(e for e in entries if e.segment not in drop).reference_before
    carried = RangeSet()
    for a, b in _carried(directory):
        if b > floor:
            carried.add_range(max(a, floor), b)
    dropped = tuple(e for e in entries if e.segment in drop)
    for a, b in _received_ranges(StreamIndex(meta, directory, dropped)):
        if b > floor:
            carried.add_range(max(a, floor), b)
    write_atomically(directory / CARRIED_FILE, json.dumps(list(carried)).encode())


def _carried(directory: Path) -> list[tuple[int, int]]:
    """Received-id ranges that only truncated segments held (see :func:`carry_received_ids`)."""
    try:
        return [(a, b) for a, b in json.loads((directory / CARRIED_FILE).read_bytes())]
    except FileNotFoundError:
        return []


def _received_ranges(view: StreamIndex) -> Iterator[tuple[int, int]]:
    """The stable message ids among a view's records, as ``[a, b)`` ranges.

    Reading them checks every batch's checksum (this is how opening the log
    verifies what it keeps). A corrupt batch's ids cannot be read: it is
    reported once, and the ids between the points of reference before and
    after it count as received, which covers all of them in an ORDERED
    stream; an unordered stream's ids above that point may be taken again.
    """
    corrupt: list[BatchCorrupt] = []
    for batch in view.read(view.earliest, view.end, on_corrupt=corrupt.append):
        for m in batch.column("message_id").filter(batch.column("stable")).to_pylist():
            yield m, m + 1
    for c in corrupt:
        record_corrupt(c)
        logger.error("aqueduct log: %s; the records are lost to readers (see docs/reliability.md)", c)
        yield c.entry.reference_before, c.entry.reference_after
