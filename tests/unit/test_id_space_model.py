"""Hypothesis state machine: one stream across bridges, read in points of reference, exactly once.

A producer writes a stream (data records and BOUNDARY records, each with
the next id) to one bridge at a time and keeps every record until its
bridge acks it; it moves to another bridge (a new one, or one holding an
older copy) and resends what is unacked from the point that bridge has.
Bridges are killed (their copy gone) and truncate what the query
committed there. The query plans a batch with the failover rules
(:func:`reach`, :func:`cut`), runs it (tasks may fail and the batch is
run again, from other copies, even after the planned ones died), reads
each piece by :func:`read_span` and :func:`belongs`, names each row's
epoch by :func:`epoch_points` from the copy's own epoch counter, and
commits: every bridge holding the stream is told :func:`commit_offset`,
and acks the point of reference there. After every step: the sink holds
each id once, in id order, epochs whole and each named by the point where
it starts whichever copy it came from, and no stable record is ever lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from aqueduct.bridge.source import id_space as rules
from aqueduct.bridge.storage.index import IndexEntry

BRIDGES = ("a", "b", "c")


def entry(first: int, count: int, before: int, after: int, complete: int) -> IndexEntry:
    return IndexEntry(0, 0, 0, first, count, before, after, complete, 0, 0, 0, True, 0)


@dataclass
class Stored:
    """One bridge's copy: records (id, boundary) at offsets from ``base``, and its group commits."""

    base: int = 0  # offset of records[0] (truncation drops records, offsets stay)
    before: int = 0  # point of reference before records[0]
    records: list[tuple[int, bool]] = field(default_factory=list)
    entries: list[IndexEntry] = field(default_factory=list)
    committed: int | None = None  # the offset the query committed here
    boundaries: bool = True  # False: a stream without BOUNDARY records, an epoch per record
    epochs: list[int] = field(default_factory=list)  # each record's epoch in this copy's own counter
    next_epoch: int = 0

    @property
    def end(self) -> int:
        return self.base + len(self.records)

    def reference_at(self, offset: int) -> int:
        return self.before if offset == self.base else self.records[offset - 1 - self.base][0] + 1

    @property
    def complete(self) -> int:
        if not self.boundaries:
            return self.end
        boundaries = [i for i, (_, b) in enumerate(self.records) if b]
        return self.base + boundaries[-1] + 1 if boundaries else self.base

    @property
    def point(self) -> int:
        """The bridge's point of reference (after every record it holds)."""
        return self.reference_at(self.end)

    def append(self, records: list[tuple[int, bool]]) -> None:
        first, before = self.end, self.point
        self.records += records
        for _, boundary in records:
            self.epochs.append(self.next_epoch)
            self.next_epoch += boundary or not self.boundaries
        self.entries.append(entry(first, len(records), before, self.point, self.complete))

    def copy(self, name: str) -> rules.Copy:
        start = rules.copy_start(self.entries)
        return rules.Copy(name, start, self.reference_at(self.complete) if self.complete > self.base else start)

    def truncate(self) -> None:
        """Drop whole group commits below what the query committed here."""
        while len(self.entries) > 1 and self.committed is not None and self.entries[0].end_offset <= self.committed:
            dropped = self.entries.pop(0)
            self.records = self.records[dropped.count :]
            self.epochs = self.epochs[dropped.count :]
            self.base, self.before = dropped.end_offset, dropped.reference_after


class FailoverModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.next_id = 0
        self.boundary_every: dict[int, bool] = {}  # id -> is a boundary
        self.ack = 0  # the producer's point: every id below is acked, it keeps the rest
        self.current: str | None = None  # the bridge the producer is on
        self.bridges: dict[str, Stored] = {}
        self.point = rules.BEFORE_ALL  # the query's committed point
        self.planned: tuple[int, int] | None = None  # (lo, hi] of the batch planned, not yet committed
        self.sink: list[list[int]] = []  # the ids of each committed batch
        self.epoch_of: dict[int, int] = {}  # each committed id's epoch column
        self.read_epochs: dict[int, int] = {}  # the last run's
        self.boundaries = True

    @initialize(boundaries=st.booleans())
    def stream(self, boundaries: bool) -> None:
        """A stream with BOUNDARY records, or one whose every record is an epoch."""
        self.boundaries = boundaries

    # ------------------------------------------------------------ producer

    def _move(self, name: str) -> None:
        """Go to ``name``: it keeps its copy (if any); everything unacked from its point on is resent."""
        stored = self.bridges.setdefault(name, Stored(before=self.ack, boundaries=self.boundaries))
        if not stored.records and not stored.entries:
            stored.before = self.ack
        self.current = name
        resend_from = max(self.ack, stored.point) if stored.records else self.ack
        backlog = [(i, self.boundary_every[i]) for i in range(resend_from, self.next_id)]
        if backlog:
            stored.append(backlog)

    @rule(n=st.integers(1, 6), boundaries=st.lists(st.booleans(), min_size=6, max_size=6))
    def send(self, n: int, boundaries: list[bool]) -> None:
        if self.current is None:
            self._move("a")
        batch = []
        for k in range(n):
            boundary = boundaries[k] and self.boundaries
            self.boundary_every[self.next_id] = boundary
            batch.append((self.next_id, boundary))
            self.next_id += 1
        self.bridges[self.current].append(batch)  # type: ignore[index]

    @rule(name=st.sampled_from(BRIDGES))
    def move(self, name: str) -> None:
        self._move(name)

    @rule(name=st.sampled_from(BRIDGES))
    def kill(self, name: str) -> None:
        """The bridge and its log are gone; its producer moves on at once."""
        self.bridges.pop(name, None)
        if self.current == name:
            self.current = None
            self._move(next(b for b in BRIDGES if b != name))

    @rule(name=st.sampled_from(BRIDGES))
    def truncate(self, name: str) -> None:
        if name in self.bridges:
            self.bridges[name].truncate()

    # ------------------------------------------------------------ query

    def _copies(self) -> list[rules.Copy]:
        return [s.copy(n) for n, s in sorted(self.bridges.items()) if s.entries]

    @precondition(lambda self: self.planned is None)
    @rule()
    def plan(self) -> None:
        end, gaps = rules.reach(self._copies(), self.point)
        assert gaps == [], f"records lost: {gaps}"
        if end > self.point:
            self.planned = (self.point, end)

    def _read(self, lo: int, hi: int) -> list[int] | None:
        """The batch's ids as executors read them from the copies now (None: not readable now)."""
        ids: list[int] = []
        for item in rules.cut(0, lo, hi, self._copies(), BRIDGES):
            assert not isinstance(item, rules.Gap), f"records lost: {item}"
            assert isinstance(item, rules.Piece)
            if not item.candidates:
                return None
            stored = self.bridges[item.candidates[-1]]  # any candidate serves: take the least preferred
            start, end = rules.read_span(stored.entries, item.lo, item.hi, stored.complete)
            rows = range(start - stored.base, end - stored.base)
            points, _ = rules.epoch_points(
                np.array([stored.epochs[k] for k in rows], dtype=np.int64),
                np.array([stored.records[k][0] + 1 for k in rows], dtype=np.int64),
                rules.EpochCarry.at(item.lo),
            )
            for k, point in zip(rows, points.tolist(), strict=True):
                mid, boundary = stored.records[k]
                if not boundary and rules.belongs(mid + 1, True, item.lo, item.hi):
                    ids.append(mid)
                    self.read_epochs[mid] = point
        return ids

    @precondition(lambda self: self.planned is not None)
    @rule(commit=st.booleans())
    def run(self, commit: bool) -> None:
        """Run the planned batch; without ``commit`` its task fails (the sink gets nothing) and it runs again later."""
        assert self.planned is not None
        ids = self._read(*self.planned)
        if ids is None or not commit:
            return
        self.sink.append(ids)
        self.epoch_of |= {i: self.read_epochs[i] for i in ids}
        self.point = self.planned[1]
        self.planned = None
        for stored in self.bridges.values():
            offset = rules.commit_offset(stored.entries, self.point, stored.reference_at)
            if offset is not None:
                assert stored.reference_at(offset) <= self.point
                stored.committed = offset
        current = self.bridges.get(self.current or "")
        if current is not None and current.committed is not None:  # the producer's bridge acks it
            self.ack = max(self.ack, current.reference_at(current.committed))

    # ------------------------------------------------------------ what must hold

    @invariant()
    def each_id_once_in_order_epochs_whole(self) -> None:
        flat = [i for batch in self.sink for i in batch]
        assert flat == sorted(set(flat)), "an id twice or out of order"
        assert self.ack <= max(self.point, 0), "the producer was acked past what the query committed"
        data = [i for i in range(self.next_id) if not self.boundary_every[i]]
        assert flat == [i for i in data if i < self.point], "a committed id is missing"
        batch_of = {i: n for n, batch in enumerate(self.sink) for i in batch}
        epoch, epochs = [], []
        for i in range(self.next_id):
            if self.boundary_every[i] or not self.boundaries:
                epochs.append(epoch)
                epoch = []
            if not self.boundary_every[i]:
                epoch.append(i)
        for e in epochs:
            assert len({batch_of.get(i) for i in e}) <= 1, f"epoch {e} split across batches"
        start = 0  # the point where each id's epoch starts (-1: the stream's first, read from its start)
        for i in range(self.next_id):
            want = start or rules.BEFORE_ALL
            if i in self.epoch_of:
                assert self.epoch_of[i] == want, f"id {i}: epoch {self.epoch_of[i]}, not {want}"
            if self.boundary_every[i] or not self.boundaries:
                start = i + 1

    def teardown(self) -> None:
        """Drain: the query reads to the end; every id the producer wrote reaches the sink."""
        if self.current is None:
            return
        for _ in range(50):
            if self.planned is None:
                self.plan()
            if self.planned is None:
                break
            self.run(True)
        complete = max((s.copy("x").complete for s in self.bridges.values() if s.entries), default=rules.BEFORE_ALL)
        assert self.point >= complete
        current = self.bridges[self.current]
        if current.entries and current.copy("x").complete == self.point and self.point > max(current.before, 0):
            assert self.ack == self.point, "the producer's bridge holds all the query committed, yet does not ack it"


TestFailoverModel = FailoverModel.TestCase
TestFailoverModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
