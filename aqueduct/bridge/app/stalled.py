"""Which connected producers wait too long for an ACK: the ``aqueduct_stalled_producers`` gauge's rule.

A producer keeps every record until an ACK covers it, and an ACK covers a
record once every ack-driving consumer committed it in its sink. A
producer is **stalled** when it is connected and one of its streams holds
a record that became durable more than ``after`` seconds ago and is still
not acked: acks stopped reaching it (a query that does not commit, a
consumer that reads its streams and hangs, an epoch it never ended), so
its buffer fills and it will block.

The rule is read, not tracked: the age is the log's own (the index entry's
``written_at_us``, the group commit that made the oldest unacked record
durable), so nothing is counted on the hot paths and nothing is remembered
between scrapes. A scrape walks each stream once, as the lag series do
(one lookup in the stream's index each): bounded by the streams the log
holds: about 20 ms for 5,000 stalled producers of two streams each
(on a loaded two-core machine), beside the 25 ms the snapshot of their
indexes takes anyway.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from aqueduct.bridge.storage.view import StreamIndex

#: seconds a connected producer's oldest unacked record may wait before it counts as stalled (``--stalled-after``)
STALLED_AFTER = 60.0


def oldest_unacked_us(s: StreamIndex, acked: int) -> int | None:
    """When the oldest durable record of ``s`` at or above offset ``acked`` became durable (None: none is)."""
    start = max(acked, s.earliest)
    if start >= s.end:
        return None
    return s.entries_between(start, start + 1)[0].written_at_us


def stalled_producers(
    streams: Mapping[int, StreamIndex],
    owners: Mapping[int, str],
    connected: Collection[str],
    acked: Mapping[int, int],
    now_s: float,
    after_s: float,
) -> int:
    """How many of the ``connected`` producers own a stream whose oldest unacked record is older than ``after_s``.

    ``owners`` maps each stream to the producer (program/instance) that
    writes it; ``acked`` each stream to the offset below which its records
    are acked.
    """
    cutoff_us = (now_s - after_s) * 1e6
    stalled: set[str] = set()
    for sid, s in streams.items():
        owner = owners[sid]
        if owner in stalled or owner not in connected:
            continue
        since = oldest_unacked_us(s, acked.get(sid, 0))
        if since is not None and since < cutoff_us:
            stalled.add(owner)
    return len(stalled)
