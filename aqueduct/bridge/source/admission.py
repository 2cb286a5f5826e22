"""Choosing a micro-batch's end offsets: whole epochs only, within a budget.

Spark asks the source for the end of the next micro-batch, optionally
with a maximum number of records (``maxRecordsPerTrigger``) and of bytes
(``maxBytesPerTrigger``; bytes as stored in the log). Epoch
atomicity forbids cutting an epoch, so the budget is spent in whole
epochs: a stream's end offset is always the end of one of its closed
epochs. Streams share the budget round-robin in quanta, starting from a
rotating stream so that each stream regularly gets the whole budget
first; an epoch larger than the whole budget is delivered alone and whole
in the micro-batch where its stream goes first (the alternative, never
delivering it, would stall the stream forever).

This module is pure: it sees a stream only through :class:`EpochLookup`,
and what records cost only through :class:`Measure`.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


class EpochLookup(Protocol):
    """The two questions about a stream's epochs the budget logic needs."""

    def epoch_at(self, offset: int) -> int:
        """Epoch number of the record at ``offset``."""
        ...

    def first_offset_of_epoch_at_least(self, epoch: int) -> int:
        """Smallest offset whose epoch is ``>= epoch`` (the stream end if none)."""
        ...


class Measure(Protocol):
    """What the records of one stream cost against a limit (records, bytes)."""

    def cost(self, start: int, end: int) -> int:
        """Cost of records ``[start, end)``."""
        ...

    def reach(self, start: int, budget: int) -> int:
        """The largest offset ``o >= start`` with ``cost(start, o) <= budget``."""
        ...


class Records:
    """Every record costs one: the measure of ``maxRecordsPerTrigger``."""

    def cost(self, start: int, end: int) -> int:
        return end - start

    def reach(self, start: int, budget: int) -> int:
        return start + budget


class StoredBytes:
    """Bytes as the log stores them, from its index entries (``maxBytesPerTrigger``).

    An entry says how many bytes its batch of records takes; inside an
    entry bytes are spread evenly over its records, so costs are exact at
    entry edges and interpolated between them. Boundary markers and the
    Arrow framing count: they are what reading the range costs.
    """

    def __init__(self, entries: Sequence[tuple[int, int, int]]) -> None:
        """``entries``: ``(first_offset, count, length)`` of consecutive batches, in order."""
        self._firsts = [first for first, _, _ in entries]
        self._counts = [count for _, count, _ in entries]
        self._lengths = [length for _, _, length in entries]
        self._end = self._firsts[-1] + self._counts[-1] if entries else 0
        self._before = [0]  # bytes of every entry before entry i
        for length in self._lengths:
            self._before.append(self._before[-1] + length)

    def _at(self, offset: int) -> int:
        """Bytes of the records before ``offset`` (from the first entry's start)."""
        i = bisect.bisect_right(self._firsts, offset) - 1
        if i < 0:
            return 0
        inside = min(offset - self._firsts[i], self._counts[i])
        return self._before[i] + self._lengths[i] * inside // max(1, self._counts[i])

    def cost(self, start: int, end: int) -> int:
        return self._at(end) - self._at(start)

    def reach(self, start: int, budget: int) -> int:
        target = self._at(start) + budget
        lo, hi = start, max(start, self._end)  # at(lo) <= target; find the last such offset
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._at(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo


RECORDS = Records()


@dataclass(frozen=True)
class Limit:
    """At most ``amount`` per micro-batch, stream ``sid``'s records measured by ``measure(sid)``."""

    amount: int
    measure: Callable[[int], Measure]

    @classmethod
    def records(cls, amount: int) -> Limit:
        return cls(amount, lambda sid: RECORDS)


def epochs_within(stream: EpochLookup, start: int, complete: int, cap: int) -> int:
    """End of the longest run of whole epochs from ``start`` ending at or before offset ``cap``.

    ``complete`` is the end of the stream's last closed epoch. Returns
    ``start`` if even the first epoch does not fit.
    """
    if start >= complete or cap <= start:
        return start
    if cap >= complete:
        return complete
    return max(start, stream.first_offset_of_epoch_at_least(stream.epoch_at(cap)))


def end_of_epoch(stream: EpochLookup, start: int, complete: int) -> int:
    """End of the (closed) epoch holding the record at ``start``."""
    return min(complete, stream.first_offset_of_epoch_at_least(stream.epoch_at(start) + 1))


def admit(
    starts: Mapping[int, int],
    completes: Mapping[int, int],
    lookups: Mapping[int, EpochLookup],
    max_records: int | None = None,
    turn: int = 0,
    *,
    limits: Sequence[Limit] = (),
) -> dict[int, int]:
    """End offsets of the next micro-batch, per stream (same keys as ``completes``).

    ``starts`` are the previous batch's ends (missing streams start at 0),
    ``completes`` each stream's end of closed epochs, ``max_records`` a
    record budget and ``limits`` any others (bytes); with neither,
    everything complete is admitted. ``turn`` rotates which stream spends
    the budget first.
    """
    ends = {sid: starts.get(sid, 0) for sid in completes}
    budget = [*limits, *([Limit.records(max_records)] if max_records is not None else [])]
    if not budget:
        return {sid: max(ends[sid], completes[sid]) for sid in completes}
    order = sorted(sid for sid in completes if completes[sid] > ends[sid])
    if not order:
        return ends
    k = turn % len(order)
    order = order[k:] + order[:k]
    remaining = [limit.amount for limit in budget]
    admitted = False
    while min(remaining) > 0 and order:
        quanta = [max(1, left // len(order)) for left in remaining]
        still: list[int] = []
        for sid in order:
            stream, start, complete = lookups[sid], ends[sid], completes[sid]
            measures = [limit.measure(sid) for limit in budget]
            cap = min(m.reach(start, min(q, left)) for m, q, left in zip(measures, quanta, remaining, strict=True))
            end = epochs_within(stream, start, complete, cap)
            if end == start:
                whole = end_of_epoch(stream, start, complete)
                fits = all(m.cost(start, whole) <= left for m, left in zip(measures, remaining, strict=True))
                if fits or not admitted:
                    end = whole
            if end == start:
                continue  # its next epoch does not fit what is left: done for this batch
            remaining = [left - m.cost(start, end) for m, left in zip(measures, remaining, strict=True)]
            ends[sid] = end
            admitted = True
            if end < complete and min(remaining) > 0:
                still.append(sid)
            if min(remaining) <= 0:
                break
        order = still
    return ends
