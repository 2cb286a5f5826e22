"""A batch appended to the log in one call is exactly its records appended one by one.

The durable log takes the worker session's :class:`MessageBatch` whole
(:meth:`DurableLog.append`): a run of new ids in one step, anything else by
the rules record by record inside the same call, and its result says which
duplicates it dropped (``accepted``). A lone message is the batch of one and raises
:class:`DuplicateMessage` instead. Both must leave the same stored rows,
points and epochs, whatever the batch holds (duplicates, keys, boundaries,
EOS, EPHEMERAL, gaps), on ORDERED and UNORDERED streams.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aqueduct.bridge.storage.log import DuplicateMessage, DurableLog, RecordRefused
from aqueduct.bridge.storage.view import load_streams
from aqueduct.connector.batch import MessageBatch
from aqueduct.connector.frames import (
    EOS,
    EPHEMERAL,
    EVENT_TIME,
    KEY,
    UNSTABLE_REFERENCE,
    ConnectorMessage,
)
from aqueduct.wire.modes import Mode

STREAM = 4


@st.composite
def records(draw: st.DrawFn) -> ConnectorMessage:
    kind = draw(st.sampled_from(["data", "data", "timed", "keyed", "eos", "unstable", "ephemeral", "boundary"]))
    mid = None if kind == "ephemeral" else draw(st.integers(0, 30))
    if kind == "boundary":
        return ConnectorMessage.build(STREAM, message_id=mid, boundary=True)
    flags = {"timed": EVENT_TIME, "keyed": KEY, "eos": EOS, "unstable": UNSTABLE_REFERENCE, "ephemeral": EPHEMERAL}
    f = flags.get(kind, 0)
    return ConnectorMessage(f, STREAM, mid, 7 if f & EVENT_TIME else None, b"k" if f & KEY else None, b"p%d" % (mid or 0))


def _state(log: DurableLog, path: Path) -> tuple[object, ...]:
    log.commit()
    view = load_streams(path)[STREAM]
    rows = [
        (r["message_id"], r["key"], r["payload"], r["epoch"], r["boundary"], r["stable"], r["reference"])
        for b in view.read(view.earliest, view.end)
        for r in b.to_pylist()
    ]
    return rows, view.complete, [m for m in range(40) if log.is_duplicate(STREAM, m)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(records(), min_size=1, max_size=8), min_size=1, max_size=5),
    st.sampled_from([Mode.ORDERED, Mode.UNORDERED]),
    st.booleans(),
)
def test_a_batch_is_its_records_one_by_one(batches: list[list[ConnectorMessage]], mode: Mode, as_run: bool) -> None:
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        whole, each = DurableLog(Path(d1)), DurableLog(Path(d2))
        try:
            for log in (whole, each):
                log.open_stream(STREAM, "s", "p/i", mode=mode).result()
            for messages in batches:
                # a run when they make one, else general columns
                batch = MessageBatch.of(messages) if as_run else MessageBatch.general(messages)
                appended = whole.append(batch)
                kept = []
                for m in messages:
                    try:
                        each.append(m)
                    except DuplicateMessage:
                        kept.append(False)
                    else:
                        kept.append(True)
                assert list(appended.accepted or [True] * len(messages)) == kept
                stored = sum(1 for ok, m in zip(kept, messages, strict=True) if ok and not m.boundary)
                assert (appended.stored, appended.duplicates) == (stored, kept.count(False))
                assert appended.offset <= whole._stream(STREAM).end
            assert _state(whole, Path(d1)) == _state(each, Path(d2))
        finally:
            whole.close()
            each.close()


def test_a_record_that_breaks_a_rule_ends_the_batch_keeping_those_before(tmp_path: Path) -> None:
    with DurableLog(tmp_path) as log:
        log.open_stream(STREAM, "s", "p/i").result()
        batch = MessageBatch.general([ConnectorMessage(0, STREAM, m, None, None, b"x") for m in (0, 1, 2**63, 3)])
        with pytest.raises(RecordRefused, match=r"message id 9223372036854775808 is outside 0..2\*\*63-1") as refused:
            log.append(batch)
        appended = refused.value.appended  # the records before it stored; the refused ones are no duplicates
        assert (appended.accepted, appended.stored, appended.duplicates) == ((True, True, False, False), 2, 0)
        log.commit()
        assert log.durable_end(STREAM) == 2 and not log.is_duplicate(STREAM, 3)
