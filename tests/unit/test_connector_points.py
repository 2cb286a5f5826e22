"""The one rulebook for points of reference and deduplication (aqueduct.records.points).

The worker session, the durable log and the Wallaroo session all apply
``StreamPoints``; these tests pin the rule itself against its definition in
spec/connector-wire.md, and check that the session and the log, fed the same
records, end at the same point.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from aqueduct.bridge.storage.log import DuplicateMessage, DurableLog
from aqueduct.connector.events import RecordsAccepted
from aqueduct.connector.frames import PROTOCOL_VERSION, ConnectorMessage, Hello, Notify, encode
from aqueduct.connector.worker_session import WorkerConfig, WorkerSession
from aqueduct.records.points import StreamPoints
from aqueduct.wire.modes import Mode


def definition(ids: list[int | None], ordered: bool, start: int = 0) -> tuple[list[bool], list[int], int]:
    """The spec, literally: drop ids below the point or already received; move the point.

    None is a record without a stable reference: kept, and the point stays.
    Returns which records are kept, the point after each kept one, and the point.
    """
    kept: list[bool] = []
    references: list[int] = []
    received: set[int] = set(range(start))
    point = start
    for m in ids:
        if m is not None and (m < point or m in received):
            kept.append(False)
            continue
        kept.append(True)
        if m is not None:
            received.add(m)
            if ordered:
                point = m + 1
            else:
                while point in received:
                    point += 1
        references.append(point)
    return kept, references, point


def batches(ids: list[int | None], cuts: list[int]) -> list[list[int | None] | range]:
    """``ids`` cut into batches at ``cuts``; consecutive ones as a range (a run), the rest as lists."""
    out: list[list[int | None] | range] = []
    bounds = sorted({0, len(ids), *(c % (len(ids) + 1) for c in cuts)})
    for a, b in zip(bounds, bounds[1:], strict=False):
        piece = ids[a:b]
        first = piece[0]
        if first is not None and piece == list(range(first, first + len(piece))):
            out.append(range(first, first + len(piece)))
        else:
            out.append(piece)
    return out


#: Batches with runs in them: stretches of consecutive ids, duplicates and gaps between.
batch_ids = st.lists(
    st.one_of(st.none(), st.integers(0, 60), st.tuples(st.integers(0, 60), st.integers(1, 8))), max_size=40
).map(lambda items: [m for i in items for m in (range(i[0], i[0] + i[1]) if isinstance(i, tuple) else [i])])


@given(batch_ids, st.lists(st.integers(0, 200), max_size=6), st.booleans(), st.integers(0, 10))
def test_the_rule_is_the_spec(ids: list[int | None], cuts: list[int], ordered: bool, start: int) -> None:
    """Any cut of the records into batches (runs of consecutive ids as ranges, the rest as lists,
    single records as batches of one) keeps what the spec keeps, with its points."""
    points = StreamPoints(Mode.ORDERED if ordered else Mode.UNORDERED)
    points.start_from(start)
    kept: list[bool] = []
    references: list[int] = []
    for batch in batches(ids, cuts):
        mask = points.receive(batch, references)
        kept += [True] * len(batch) if mask is None else mask
    assert (kept, references, points.point) == definition(ids, ordered, start)
    assert all(points.holds(m) for m, new in zip(ids, kept, strict=True) if new and m is not None)
    assert not points.holds(points.point)


@given(st.lists(st.integers(0, 40), max_size=30), st.booleans(), st.integers(0, 50), st.integers(1, 8), st.integers(0, 20))
def test_a_run_is_its_ids_as_batches_of_one(
    prior: list[int], ordered: bool, start: int, count: int, notified: int
) -> None:
    """A run after any history: the same mask, points and received set as each id on its own."""
    mode = Mode.ORDERED if ordered else Mode.UNORDERED
    run, one_by_one = StreamPoints(mode), StreamPoints(mode)
    for points in (run, one_by_one):
        points.start_from(notified)  # a NOTIFY's point: ids below it never come, none of them received
        points.receive(prior)
    references: list[int] = []
    mask = run.receive(range(start, start + count), references)
    each: list[bool] = []
    each_references: list[int] = []
    for m in range(start, start + count):
        each.append(one_by_one.receive(range(m, m + 1), each_references) is None)
    assert ([True] * count if mask is None else mask) == each
    assert references == each_references
    assert (run.point, list(run.received)) == (one_by_one.point, list(one_by_one.received))


def test_an_ordered_stream_that_skips_ids_stays_one_range() -> None:
    """Scale: compacted offsets (every tenth id) must not grow the received set."""
    points = StreamPoints(Mode.ORDERED)
    for m in range(0, 100_000, 10):
        assert points.receive(range(m, m + 1)) is None
    assert len(points.received) == 1 and points.point == 99_991


def test_the_session_and_the_log_agree(tmp_path: Path) -> None:
    """Same records into a worker session and into the log: same kept ids, same point."""
    ids = [0, 1, 5, 5, 3, 9, 2, 9, 12]
    records = [ConnectorMessage.build(7, b"x", message_id=m) for m in ids]
    session = WorkerSession(WorkerConfig(initial_credits=100))
    session.receive_data(encode(Hello(PROTOCOL_VERSION, b"", "c", "1")))
    session.receive_payload(
        encode(Notify(7, "s", 0)), mode=Mode.ORDERED, stream_modes=[Mode.UNORDERED]
    )
    events = session.receive_payload(
        b"".join(encode(r) for r in records), mode=Mode.UNORDERED, channel_stream=7
    )
    by_session = [r.message_id for e in events if isinstance(e, RecordsAccepted) for r in e.records]
    with DurableLog(tmp_path / "log") as log:
        log.open_stream(7, "s", "c/1", mode=Mode.UNORDERED)
        by_log = []
        for r in records:
            try:
                log.append(r)
                by_log.append(r.message_id)
            except DuplicateMessage:
                pass
        log.commit()
        assert log.durable_reference(7) == session.streams[7].point_of_reference == 4
    assert by_session == by_log == [0, 1, 5, 3, 9, 2, 12]


def test_ids_below_a_raised_point_are_held_though_never_received(tmp_path: Path) -> None:
    """A NOTIFY's (or the log's durable) point drops every id below it, received here or not."""
    for mode in (Mode.ORDERED, Mode.UNORDERED):
        points = StreamPoints(mode)
        points.receive([0])
        assert points.start_from(10) == 10
        assert all(points.holds(m) for m in range(10)) and not points.holds(10)
        assert points.receive([5, 10]) == [False, True]
    with DurableLog(tmp_path / "log") as log:
        log.open_stream(1, "s", "c/1", point_of_reference=10).result()
        assert [m for m in range(12) if log.is_duplicate(1, m)] == list(range(10))
