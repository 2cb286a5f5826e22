"""Micro-batch admission: whole epochs only, within the record budget, no starvation."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from aqueduct.bridge.source.admission import Limit, StoredBytes, admit


@dataclass
class Epochs:
    """A stream given as the epoch number of each record (a model of the log)."""

    epochs: list[int]

    def epoch_at(self, offset: int) -> int:
        return self.epochs[offset]

    def first_offset_of_epoch_at_least(self, epoch: int) -> int:
        return bisect.bisect_left(self.epochs, epoch)

    def boundaries(self) -> set[int]:
        """Offsets at which an epoch ends (and the next starts)."""
        return {i for i in range(1, len(self.epochs)) if self.epochs[i] != self.epochs[i - 1]} | {
            0,
            len(self.epochs),
        }


@st.composite
def streams(draw) -> tuple[dict[int, Epochs], dict[int, int], dict[int, int]]:
    """Streams with random epoch sizes, a complete point and a start at epoch ends."""
    out, completes, starts = {}, {}, {}
    for sid in draw(st.lists(st.integers(0, 50), min_size=1, max_size=4, unique=True)):
        sizes = draw(st.lists(st.integers(1, 8), min_size=0, max_size=10))
        epochs = [e for e, n in enumerate(sizes) for _ in range(n)]
        open_tail = draw(st.integers(0, 3))
        epochs += [len(sizes)] * open_tail  # an epoch still open: never admitted
        s = Epochs(epochs)
        ends = sorted(b for b in s.boundaries() if b <= len(epochs) - open_tail)
        completes[sid] = ends[-1]
        starts[sid] = draw(st.sampled_from(ends))
        out[sid] = s
    return out, starts, completes


@settings(max_examples=300, deadline=None)
@given(streams(), st.one_of(st.none(), st.integers(1, 30)), st.integers(0, 10))
def test_admission_respects_epochs_limit_and_progress(data, limit, turn) -> None:
    lookups, starts, completes = data
    ends = admit(starts, completes, lookups, limit, turn)
    assert set(ends) == set(completes)
    taken = {sid: ends[sid] - starts[sid] for sid in ends}
    for sid, end in ends.items():
        assert starts[sid] <= end <= completes[sid]
        assert end in lookups[sid].boundaries()  # never inside an epoch
    available = any(completes[sid] > starts[sid] for sid in completes)
    assert (sum(taken.values()) > 0) == available  # progress whenever something is complete
    if limit is None:
        assert ends == completes
    elif sum(taken.values()) > limit:
        # only one oversized epoch, alone, may exceed the limit
        (sid,) = [s for s, n in taken.items() if n]
        assert lookups[sid].epochs[starts[sid]] == lookups[sid].epochs[ends[sid] - 1]


def test_epoch_larger_than_the_limit_is_delivered_whole_and_alone() -> None:
    big = Epochs([0] * 10 + [1])
    small = Epochs(list(range(10)))
    lookups = {1: big, 2: small}
    ends = admit({}, {1: 11, 2: 10}, lookups, max_records=4, turn=0)
    assert ends == {1: 10, 2: 0}


def test_rotation_gives_each_stream_the_budget_first() -> None:
    # Stream 1 always has plenty of small epochs; stream 2 has one epoch of 5 records.
    lookups = {1: Epochs(list(range(100))), 2: Epochs([0] * 5)}
    firsts = [admit({}, {1: 100, 2: 5}, lookups, max_records=6, turn=t)[2] for t in range(2)]
    assert 5 in firsts


def test_limit_shared_fairly_between_streams() -> None:
    lookups = {1: Epochs(list(range(100))), 2: Epochs(list(range(100)))}
    assert admit({}, {1: 100, 2: 100}, lookups, max_records=10) == {1: 5, 2: 5}


@st.composite
def stored(draw) -> tuple[StoredBytes, int]:
    """Index entries of consecutive batches: (first offset, count, bytes); the end offset."""
    entries, first = [], draw(st.integers(0, 5))
    for count in draw(st.lists(st.integers(1, 6), min_size=1, max_size=8)):
        entries.append((first, count, draw(st.integers(0, 500))))
        first += count
    return StoredBytes(entries), first


@settings(max_examples=300, deadline=None)
@given(stored(), st.data())
def test_stored_bytes_reach_is_the_furthest_offset_within_the_budget(sized, data) -> None:
    measure, end = sized
    start = data.draw(st.integers(measure._firsts[0], end))
    budget = data.draw(st.integers(0, 2000))
    reach = measure.reach(start, budget)
    assert start <= reach <= end
    assert measure.cost(start, reach) <= budget
    assert reach == end or measure.cost(start, reach + 1) > budget


@settings(max_examples=300, deadline=None)
@given(streams(), st.integers(1, 30), st.integers(1, 100), st.integers(0, 10))
def test_a_byte_limit_holds_beside_the_record_limit(data, max_records, max_bytes, turn) -> None:
    lookups, starts, completes = data
    size = {sid: (sid % 7) + 1 for sid in lookups}  # bytes per record, per stream

    class PerRecord:
        def __init__(self, n: int) -> None:
            self.n = n

        def cost(self, start: int, end: int) -> int:
            return (end - start) * self.n

        def reach(self, start: int, budget: int) -> int:
            return start + budget // self.n

    limit = Limit(max_bytes, lambda sid: PerRecord(size[sid]))
    ends = admit(starts, completes, lookups, max_records, turn, limits=[limit])
    taken = {sid: ends[sid] - starts[sid] for sid in ends}
    for sid, end in ends.items():
        assert end in lookups[sid].boundaries()
    available = any(completes[sid] > starts[sid] for sid in completes)
    assert (sum(taken.values()) > 0) == available
    spent = sum(n * size[sid] for sid, n in taken.items())
    if sum(taken.values()) > max_records or spent > max_bytes:
        (sid,) = [s for s, n in taken.items() if n]  # one oversized epoch, alone
        assert lookups[sid].epochs[starts[sid]] == lookups[sid].epochs[ends[sid] - 1]
