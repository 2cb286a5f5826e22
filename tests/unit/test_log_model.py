"""Hypothesis state machine: the log against a model, across commits, crashes and truncation.

The model is the definition: a stream's committed records, from which its
epochs, complete point and points of reference follow. The log computes
them incrementally and recovers them from its index after a crash; after
every step a reader (as the Spark source would) must see exactly the model.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from aqueduct.bridge.storage.log import DurableLog
from aqueduct.bridge.storage.segment import segment_bases, segment_name
from aqueduct.bridge.storage.view import load_streams
from aqueduct.connector.batch import MessageBatch
from aqueduct.connector.frames import EVENT_TIME, ConnectorMessage
from aqueduct.wire.modes import Mode

ORDERED, UNORDERED = 1, 2
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Rec:
    payload: bytes
    message_id: int | None
    stable: bool
    boundary: bool
    event_time: int | None = None  # microseconds


def general(records: list[ConnectorMessage]) -> MessageBatch:
    """``records`` as general columns (flag, id and key each), which every stop takes record by record."""
    return MessageBatch(
        records[0].stream_id, 0, [r.payload for r in records], [r.event_time for r in records],
        [r.flags for r in records], [r.message_id for r in records], [r.key for r in records],
    )  # fmt: skip


def micros(t: datetime | None) -> int | None:
    return None if t is None else (t - EPOCH) // timedelta(microseconds=1)


def derive(records: list[Rec], ordered: bool) -> tuple[list[int], list[int], int]:
    """Epoch of each record, point of reference after each record, complete offset."""
    epochs, refs = [], []
    epoch, uses_boundaries, complete, ref = 0, False, 0, 0
    received: set[int] = set()
    for i, r in enumerate(records):
        if r.stable:
            received.add(r.message_id)
            if ordered:
                ref = r.message_id + 1
            else:
                while ref in received:
                    ref += 1
        epochs.append(epoch)
        refs.append(ref)
        uses_boundaries |= r.boundary
        if r.boundary or not uses_boundaries:
            epoch += 1
            complete = i + 1
    return epochs, refs, complete


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="aqlog-"))
        self.path = self.dir / "log"
        self.log = DurableLog(self.path, segment_bytes=1500, max_open_streams=1)  # every commit closes and reopens files
        self.log.open_stream(ORDERED, "o", "c/1").result()
        self.log.open_stream(UNORDERED, "u", "c/1", mode=Mode.UNORDERED).result()
        self.committed: dict[int, list[Rec]] = {ORDERED: [], UNORDERED: []}
        self.pending: dict[int, list[Rec]] = {ORDERED: [], UNORDERED: []}
        self.next_ordered_id = 0
        self.unordered_sent: set[int] = set()
        self.earliest = {ORDERED: 0, UNORDERED: 0}

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir)

    def _append(self, sid: int, rec: Rec) -> None:
        self.log.append(ConnectorMessage.build(
            sid,
            rec.payload,
            message_id=rec.message_id,
            boundary=rec.boundary,
            unstable=not rec.stable,
        ))
        self.pending[sid].append(rec)

    @rule(
        kind=st.sampled_from(["stable", "unstable", "ephemeral", "boundary"]),
        step=st.integers(1, 3),
        payload=st.binary(max_size=40),
    )
    def append_ordered(self, kind: str, step: int, payload: bytes) -> None:
        mid = None if kind == "ephemeral" else self.next_ordered_id + step - 1
        if mid is not None:
            self.next_ordered_id = mid + 1
        rec = Rec(
            b"" if kind == "boundary" else payload,
            mid,
            kind in ("stable", "boundary"),
            kind == "boundary",
        )
        self._append(ORDERED, rec)

    @rule(ahead=st.integers(0, 3), payload=st.binary(max_size=40))
    def append_unordered(self, ahead: int, payload: bytes) -> None:
        free = [m for m in range(len(self.unordered_sent) + 4) if m not in self.unordered_sent]
        mid = free[min(ahead, len(free) - 1)]
        self.unordered_sent.add(mid)
        self._append(UNORDERED, Rec(payload, mid, True, False))

    @rule(skip=st.integers(0, 2), count=st.integers(2, 6), timed=st.booleans(), columns=st.booleans())
    def append_ordered_run(self, skip: int, count: int, timed: bool, columns: bool) -> None:
        """A busy stream's batch: consecutive stable ids, taken in one step (same result as one by one).

        ``columns``: as the worker hands it over (a run of columns), else as general
        columns, which the log takes record by record: the same result.
        """
        start = self.next_ordered_id + skip
        self._append_run(ORDERED, start, count, timed, columns)
        self.next_ordered_id = start + count

    @rule(ahead=st.integers(0, 3), back=st.integers(0, 3), count=st.integers(2, 5), columns=st.booleans())
    def append_unordered_run(self, ahead: int, back: int, count: int, columns: bool) -> None:
        """Runs above a gap, runs that fill it, and runs that overlap ids the log holds (dropped, the rest kept)."""
        top = max(self.unordered_sent, default=-1) + 1
        free = [m for m in range(top + 1) if m not in self.unordered_sent]
        start = max(0, free[min(ahead, len(free) - 1)] - back)
        new = [m not in self.unordered_sent for m in range(start, start + count)]
        self.unordered_sent.update(range(start, start + count))
        self._append_run(UNORDERED, start, count, False, columns, new)

    def _append_run(
        self, sid: int, start: int, count: int, timed: bool, columns: bool = False, new: list[bool] | None = None
    ) -> None:
        """One batch of consecutive ids; ``new`` says which the log does not hold yet (None: all)."""
        records = [
            ConnectorMessage(EVENT_TIME if timed else 0, sid, m, 1_000 + m if timed else None, None, b"r%d" % m)
            for m in range(start, start + count)
        ]
        batch = MessageBatch.of(records) if columns else general(records)
        assert batch.is_run == columns
        appended = self.log.append(batch)
        assert appended.offset == len(self.committed[sid]) + len(self.pending[sid])
        kept = count if new is None else sum(new)
        assert appended.accepted == (None if kept == count else tuple(new or ()))
        assert (appended.stored, appended.duplicates) == (kept, count - kept)
        self.pending[sid].extend(
            Rec(r.payload, r.message_id, True, False, r.event_time)
            for r, is_new in zip(records, new or [True] * count, strict=True)
            if is_new
        )

    @rule()
    def commit(self) -> None:
        result = self.log.commit()
        for sid, recs in self.pending.items():
            self.committed[sid].extend(recs)
            if recs:
                assert result[sid] == len(self.committed[sid])
            recs.clear()

    @rule(
        garbage=st.binary(min_size=1, max_size=300),
        where=st.sampled_from(["none", "segment", "index"]),
    )
    def crash_and_reopen(self, garbage: bytes, where: str) -> None:
        self.log.close()  # pending records are lost, as in a crash
        for sid, recs in self.pending.items():
            sent = {r.message_id for r in recs if r.message_id is not None}
            if sid == UNORDERED:
                self.unordered_sent -= sent
            recs.clear()
        self.next_ordered_id = max(
            [r.message_id + 1 for r in self.committed[ORDERED] if r.message_id is not None],
            default=0,
        )
        d = self.path / "streams" / str(ORDERED)
        if where == "segment" and segment_bases(d):
            with open(d / segment_name(segment_bases(d)[-1]), "ab") as f:
                f.write(garbage)
        elif where == "index":
            with open(d / "index", "ab") as f:
                f.write(garbage)
        self.log = DurableLog(self.path, segment_bytes=1500, max_open_streams=1)

    @precondition(lambda self: any(self.committed.values()))
    @rule(sid=st.sampled_from([ORDERED, UNORDERED]), frac=st.floats(0, 1))
    def truncate(self, sid: int, frac: float) -> None:
        below = int(len(self.committed[sid]) * frac)
        earliest = self.log.truncate(sid, below).result()
        assert self.earliest[sid] <= earliest
        assert earliest <= max(below, self.earliest[sid])
        self.earliest[sid] = earliest

    @invariant()
    def reader_sees_the_model(self) -> None:
        streams = load_streams(self.path)
        for sid, ordered in ((ORDERED, True), (UNORDERED, False)):
            recs = self.committed[sid]
            epochs, refs, complete = derive(recs, ordered)
            s = streams[sid]
            assert s.earliest == self.earliest[sid]
            assert (s.end, s.complete) == (len(recs), complete)
            assert s.reference == (refs[-1] if refs else 0)
            got = [row for b in s.read(s.earliest, s.end) for row in b.to_pylist()]
            lo = s.earliest
            assert [r["payload"] for r in got] == [r.payload for r in recs[lo:]]
            assert [r["message_id"] for r in got] == [r.message_id for r in recs[lo:]]
            assert [r["epoch"] for r in got] == epochs[lo:]
            assert [micros(r["event_time"]) for r in got] == [r.event_time for r in recs[lo:]]
            for x in range(lo, len(recs) + 1):
                assert s.reference_at(x) == (refs[x - 1] if x else 0)
            for r in recs:
                if r.stable:
                    assert self.log.is_duplicate(sid, r.message_id)


LogMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("AQ_LOG_EXAMPLES", "40")),
    stateful_step_count=25,
    deadline=None,
)
TestLogModel = LogMachine.TestCase
