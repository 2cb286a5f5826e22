"""Choosing a micro-batch's end offsets: whole epochs only, within a record budget.

Spark asks the source for the end of the next micro-batch, optionally
with a maximum number of records (``maxRecordsPerTrigger``). Epoch
atomicity forbids cutting an epoch, so the budget is spent in whole
epochs: a stream's end offset is always the end of one of its closed
epochs. Streams share the budget round-robin in quanta, starting from a
rotating stream so that each stream regularly gets the whole budget
first; an epoch larger than the whole budget is delivered alone and whole
in the micro-batch where its stream goes first (the alternative, never
delivering it, would stall the stream forever).

This module is pure: it sees a stream only through :class:`EpochLookup`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class EpochLookup(Protocol):
    """The two questions about a stream's epochs the budget logic needs."""

    def epoch_at(self, offset: int) -> int:
        """Epoch number of the record at ``offset``."""
        ...

    def first_offset_of_epoch_at_least(self, epoch: int) -> int:
        """Smallest offset whose epoch is ``>= epoch`` (the stream end if none)."""
        ...


def epochs_within(stream: EpochLookup, start: int, complete: int, budget: int) -> int:
    """End of the longest run of whole epochs from ``start`` holding at most ``budget`` records.

    ``complete`` is the end of the stream's last closed epoch. Returns
    ``start`` if even the first epoch does not fit.
    """
    if start >= complete or budget <= 0:
        return start
    cap = start + budget
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
    max_records: int | None,
    turn: int = 0,
) -> dict[int, int]:
    """End offsets of the next micro-batch, per stream (same keys as ``completes``).

    ``starts`` are the previous batch's ends (missing streams start at 0),
    ``completes`` each stream's end of closed epochs, ``max_records`` the
    budget (``None`` = everything complete), ``turn`` rotates which stream
    spends the budget first.
    """
    ends = {sid: starts.get(sid, 0) for sid in completes}
    if max_records is None:
        return {sid: max(ends[sid], completes[sid]) for sid in completes}
    order = sorted(sid for sid in completes if completes[sid] > ends[sid])
    if not order:
        return ends
    k = turn % len(order)
    order = order[k:] + order[:k]
    remaining = max_records
    admitted = False
    while remaining > 0 and order:
        quantum = max(1, remaining // len(order))
        still: list[int] = []
        for sid in order:
            stream, start, complete = lookups[sid], ends[sid], completes[sid]
            end = epochs_within(stream, start, complete, min(quantum, remaining))
            if end == start:
                whole = end_of_epoch(stream, start, complete)
                if whole - start <= remaining or not admitted:
                    end = whole
            if end == start:
                continue  # its next epoch does not fit what is left: done for this batch
            remaining -= end - start
            ends[sid] = end
            admitted = True
            if end < complete and remaining > 0:
                still.append(sid)
            if remaining <= 0:
                break
        order = still
    return ends
