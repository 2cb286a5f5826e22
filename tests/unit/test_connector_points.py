"""The one rulebook for points of reference and deduplication (aqueduct.connector.points).

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
from aqueduct.connector.frames import PROTOCOL_VERSION, Hello, Message, Notify, encode
from aqueduct.connector.points import StreamPoints
from aqueduct.connector.worker_session import WorkerConfig, WorkerSession
from aqueduct.wire.modes import Mode


def definition(ids: list[int], ordered: bool, start: int = 0) -> tuple[list[int], int]:
    """The spec, literally: drop ids below the point or already received; move the point."""
    kept: list[int] = []
    received: set[int] = set(range(start))
    point = start
    for m in ids:
        if m < point or m in received:
            continue
        kept.append(m)
        received.add(m)
        if ordered:
            point = m + 1
        else:
            while point in received:
                point += 1
    return kept, point


@given(st.lists(st.integers(0, 60), max_size=80), st.booleans(), st.integers(0, 10))
def test_the_rule_is_the_spec(ids: list[int], ordered: bool, start: int) -> None:
    points = StreamPoints(Mode.ORDERED if ordered else Mode.UNORDERED)
    points.start_from(start)
    kept = [m for m in ids if points.receive(m)]
    assert (kept, points.point) == definition(ids, ordered, start)
    assert all(points.holds(m) for m in kept) and not points.holds(points.point)


def test_an_ordered_stream_that_skips_ids_stays_one_range() -> None:
    """Scale: compacted offsets (every tenth id) must not grow the received set."""
    points = StreamPoints(Mode.ORDERED)
    for m in range(0, 100_000, 10):
        assert points.receive(m)
    assert len(points.received) == 1 and points.point == 99_991


def test_the_session_and_the_log_agree(tmp_path: Path) -> None:
    """Same records into a worker session and into the log: same kept ids, same point."""
    ids = [0, 1, 5, 5, 3, 9, 2, 9, 12]
    records = [Message.build(7, b"x", message_id=m) for m in ids]
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
        points.receive(0)
        assert points.start_from(10) == 10
        assert all(points.holds(m) for m in range(10)) and not points.holds(10)
        assert not points.receive(5) and points.receive(10)
    with DurableLog(tmp_path / "log") as log:
        log.open_stream(1, "s", "c/1", point_of_reference=10).result()
        assert [m for m in range(12) if log.is_duplicate(1, m)] == list(range(10))
