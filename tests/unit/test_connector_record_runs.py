"""A batch taken in one step must be exactly its records taken one by one.

A busy stream's channel carries payloads of consecutive new data records,
which the decoder gathers into a :class:`MessageBatch` run; the worker
session (:meth:`WorkerSession._on_batch`), the rulebook
(:meth:`StreamPoints.receive`, against the spec in test_connector_points) and the durable log
(:meth:`DurableLog.append`, checked against the log's model in
test_log_model) take such a run at once. Anything unusual goes by the
per-record rules inside the same call, with the same events, errors,
credits and points.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aqueduct.connector.batch import MessageBatch
from aqueduct.connector.connector_session import RUN_ENTRY_BYTES, ConnectorSession
from aqueduct.connector.events import RecordsAccepted, SessionEnded
from aqueduct.connector.frames import (
    EOS,
    EPHEMERAL,
    EVENT_TIME,
    PROTOCOL_VERSION,
    UNSTABLE_REFERENCE,
    ConnectorMessage,
    Hello,
    Notify,
    Ok,
    encode,
)
from aqueduct.connector.inbound import DurableStream
from aqueduct.connector.outbound import Outbox
from aqueduct.connector.worker_session import WorkerConfig, WorkerSession
from aqueduct.wire.modes import Mode

STREAM = 3


def notified_connector(credits: int) -> ConnectorSession:
    """A connector session past OK with ``credits``, its stream notified (which spent one)."""
    session = ConnectorSession("p", "i")
    session.start()
    session.receive_data(encode(Ok(credits, ())))
    session.send(Notify(STREAM, "s", 0))
    session.data_to_send()
    return session


def general(records: MessageBatch | list[ConnectorMessage]) -> MessageBatch:
    """``records`` as general columns (flag, id and key each), which every stop takes record by record."""
    flags, ids, keys = MessageBatch.of(records).columns()
    return MessageBatch(
        records[0].stream_id, 0, [r.payload for r in records], [r.event_time for r in records],
        list(flags), list(ids), list(keys),
    )  # fmt: skip


class RecordByRecord(WorkerSession):
    """The reference: every record as a batch of one, in general columns (never a run)."""

    def _on_batch(self, batch: MessageBatch) -> None:
        for row in range(len(batch)):  # a broken rule raises, ending the batch there
            super()._on_batch(general(batch.select([row])))


def test_a_run_is_consecutive_stable_data() -> None:
    def recs(ids: list[int | None], flags: int = 0) -> list[ConnectorMessage]:
        return [ConnectorMessage(flags, STREAM, m, 5 if flags & EVENT_TIME else None, None, b"x") for m in ids]

    def is_run(records: list[ConnectorMessage]) -> bool:
        return MessageBatch.of(records).is_run

    assert is_run(recs([4, 5, 6]))
    assert is_run(recs([4, 5, 6], EVENT_TIME))
    assert not is_run(recs([4, 6, 7]))  # a gap
    assert not is_run(recs([5, 4]))
    assert not is_run(recs([4, 5], EOS))
    assert not is_run(recs([4, 5], UNSTABLE_REFERENCE))
    assert not is_run(recs([None, None], EPHEMERAL))
    assert not is_run([ConnectorMessage(0, STREAM, 4, 5, None, b"x")])  # an event time without its flag
    assert not is_run([ConnectorMessage(0, STREAM, 4, None, b"k", b"x")])  # a key without its flag
    assert not is_run([ConnectorMessage(0, STREAM, 4, None, None, None)])  # no payload
    # Only values a frame can carry: the session sends a run without checking each record.
    assert not is_run([ConnectorMessage(0, STREAM, -1, None, None, b"x")])
    assert not is_run([ConnectorMessage(0, STREAM, m, None, None, b"x") for m in (2**64 - 1, 2**64)])
    assert is_run([ConnectorMessage(0, STREAM, 2**64 - 1, None, None, b"x")])
    assert not is_run([ConnectorMessage(0, 2**64, 4, None, None, b"x")])
    assert not is_run([ConnectorMessage(EVENT_TIME, STREAM, 4, 2**64, None, b"x")])
    assert not is_run([ConnectorMessage(EVENT_TIME, STREAM, 4, -5, None, b"x")])
    assert not is_run([ConnectorMessage(EVENT_TIME, STREAM, 4, 5.0, None, b"x")])  # type: ignore[arg-type]
    assert MessageBatch.run_of(recs([4, 6])) is None and MessageBatch.run_of([]) is None
    assert MessageBatch.run_of(recs([4, 5])) == recs([4, 5])
    with pytest.raises(ValueError, match="several streams"):
        MessageBatch.of([ConnectorMessage(0, STREAM, 4, None, None, b"x"), ConnectorMessage(0, STREAM + 1, 5, None, None, b"x")])
    with pytest.raises(ValueError, match="no messages"):
        MessageBatch.of([])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0, EVENT_TIME, EOS, UNSTABLE_REFERENCE, EPHEMERAL]),
            st.one_of(st.integers(0, 5), st.sampled_from([-1, 2**64 - 1, 2**64])),
            st.one_of(st.none(), st.integers(0, 9), st.sampled_from([-1, 2**64])),
            st.binary(max_size=8),
        ),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 2**64 - 20),
    st.booleans(),
)
def test_a_batch_encodes_as_its_messages_one_by_one(
    rows: list[tuple[int, int, int | None, bytes]], first: int, consecutive: bool
) -> None:
    """encode of a MessageBatch (a run packed from its columns, else record by record) is the
    encodings of its messages, batches of one, back to back; or the error of the first bad one."""
    records = [
        ConnectorMessage(
            f, STREAM, None if f & EPHEMERAL else (first + i if consecutive else m),
            t if f & EVENT_TIME else None, None, p,
        )
        for i, (f, m, t, p) in enumerate(rows)
    ]  # fmt: skip

    def outcome(encode_all: object) -> object:
        try:
            return encode_all()  # type: ignore[operator]
        except Exception as exc:  # noqa: BLE001 - the comparison is the point
            return type(exc), str(exc)

    expected = outcome(lambda: b"".join(encode(r) for r in records))
    assert outcome(lambda: encode(MessageBatch.of(records))) == expected
    assert outcome(lambda: encode(MessageBatch.general(records))) == expected
    run = MessageBatch.run(STREAM, first, [r.payload or b"" for r in records], [r.event_time for r in records])
    each = [ConnectorMessage(EVENT_TIME if t is not None else 0, STREAM, first + i, t, None, p) for i, (p, t) in enumerate(
        zip(run.payloads, run.event_times, strict=True))]  # fmt: skip
    assert outcome(lambda: encode(run)) == outcome(lambda: b"".join(encode(r) for r in each))


# One chunk: a run from some start, then what to do to it.
chunk = st.tuples(
    st.integers(-3, 6),  # start relative to the next id (negative: duplicates / going back)
    st.integers(1, 12),  # records
    st.sampled_from(["plain", "timed", "gap", "eos", "unstable", "ephemeral", "swap"]),
)


def _records(next_id: int, start: int, count: int, kind: str) -> list[ConnectorMessage]:
    ids: list[int | None] = list(range(max(0, next_id + start), max(0, next_id + start) + count))
    flags = {"timed": EVENT_TIME, "unstable": UNSTABLE_REFERENCE, "ephemeral": EPHEMERAL}.get(kind, 0)
    if kind == "gap" and count > 2:
        ids[count // 2] += 100  # type: ignore[operator]
    if kind == "swap" and count > 1:
        ids[0], ids[1] = ids[1], ids[0]
    if kind == "ephemeral":
        ids = [None] * count
    records = [
        ConnectorMessage(flags, STREAM, m, 7 if flags & EVENT_TIME else None, None, b"p%d" % i) for i, m in enumerate(ids)
    ]
    if kind == "eos":
        records[-1].flags |= EOS
    return records


def _summary(session: WorkerSession, events: list[object]) -> list[object]:
    out: list[object] = []
    for e in events:
        if isinstance(e, RecordsAccepted):
            out.append(("records", e.stream_id, [(r.flags, r.message_id, r.payload) for r in e.records]))
        else:
            out.append(e)
    stream = session.streams.get(STREAM)
    state = None
    if stream is not None:
        state = (stream.state, stream.last_id, stream.eos_id, stream.points.point, list(stream.points.received))
    return [out, session.data_to_send(), session._credits, session.state, state]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(chunk, min_size=1, max_size=8),
    st.sampled_from([Mode.ORDERED, Mode.UNORDERED, "tcp"]),
    st.integers(5, 60),
    st.integers(0, 10),
    st.integers(0, 10),
)
def test_a_session_takes_runs_exactly_as_records(
    chunks: list[tuple[int, int, str]], mode: Mode | str, credits: int, durable_point: int, notify_above: int
) -> None:
    """Same input into the run path and the per-record path: same events, bytes, credits, points.

    Over Aqueduct (a stream channel's payloads, ORDERED or UNORDERED) and
    over TCP (one byte stream, in order).
    """
    tcp = mode == "tcp"
    if tcp:
        mode = Mode.ORDERED
    def durable(program: str, instance: str) -> list[DurableStream]:
        return [DurableStream(STREAM, "s", durable_point)]

    sessions = [
        cls(WorkerConfig(initial_credits=credits), durable) for cls in (WorkerSession, RecordByRecord)
    ]
    for s in sessions:
        s.receive_data(encode(Hello(PROTOCOL_VERSION, b"", "c", "1")))
        # The connector's NOTIFY point may be above what the worker holds durably.
        notify = encode(Notify(STREAM, "s", durable_point + notify_above))
        if tcp:
            s.receive_data(notify)
        else:
            s.receive_payload(notify, mode=Mode.ORDERED, stream_modes=[mode])  # type: ignore[list-item]
    assert _summary(sessions[0], []) == _summary(sessions[1], [])
    next_id = durable_point + notify_above
    for start, count, kind in chunks:
        records = _records(next_id, start, count, kind)
        payload = b"".join(encode(r) for r in records)
        got = [
            _summary(s, s.receive_data(payload) if tcp else s.receive_payload(payload, mode=mode, channel_stream=STREAM))  # type: ignore[arg-type]
            for s in sessions
        ]
        assert got[0] == got[1]
        next_id = max([next_id] + [r.message_id + 1 for r in records if r.message_id is not None])
        if any(isinstance(e, SessionEnded) for e in got[0][0]):  # type: ignore[union-attr]
            break


def test_a_busy_streams_payload_is_one_run() -> None:
    """The case the run path is for: one RecordsAccepted, credits spent, point moved."""
    session = WorkerSession(WorkerConfig(initial_credits=100))
    session.receive_data(encode(Hello(PROTOCOL_VERSION, b"", "c", "1")))
    session.receive_payload(encode(Notify(STREAM, "s", 0)), mode=Mode.ORDERED, stream_modes=[Mode.ORDERED])
    records = [ConnectorMessage(0, STREAM, m, None, None, b"x") for m in range(64)]
    events = session.receive_payload(b"".join(encode(r) for r in records), mode=Mode.ORDERED, channel_stream=STREAM)
    assert events == [RecordsAccepted(STREAM, tuple(records))]  # type: ignore[arg-type]
    # As the decoder's columns: no ConnectorMessage object was built for them.
    batch = events[0].records  # type: ignore[union-attr]
    assert batch.is_run and batch.payloads == [b"x"] * 64
    assert session._credits == 100 - 64  # the NOTIFY's credit came back at once
    assert session.streams[STREAM].point_of_reference == 64


def test_the_outbox_splits_a_run_where_the_credits_end() -> None:
    outbox = Outbox()
    stream = outbox.open(1, "s", Mode.ORDERED)
    outbox.push(stream.make_messages([b"a", b"b", b"c", b"d"], None, False))
    assert len(outbox) == 5  # the NOTIFY and four records
    first = outbox.take(3)
    assert isinstance(first[0], Notify) and [r.message_id for r in first[1]] == [0, 1]
    assert len(outbox) == 2
    assert [[r.message_id for r in run] for run in outbox.take(10)] == [[2, 3]]
    assert len(outbox) == 0 and outbox.take(4) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(chunk, min_size=1, max_size=6), st.integers(0, 40))
def test_a_connector_session_sends_runs_as_records(chunks: list[tuple[int, int, str]], credits: int) -> None:
    """send_messages of a batch, send of each (batches of one) and the rules applied to each
    (the reference): the same bytes out, records, credits, stream states and errors."""
    def outcome(session: ConnectorSession, send: object) -> tuple[object, ...]:
        try:
            send()  # type: ignore[operator]
            error = None
        except Exception as exc:  # noqa: BLE001 - the comparison is the point
            error = (type(exc), str(exc))
        out = session.data_to_send()
        records = [r for frame, _ in out for r in (frame if isinstance(frame, MessageBatch) else [frame])]
        return error, b"".join(data for _, data in out), records, session.credits, dict(session.streams)

    run, one_by_one, by_rules = (notified_connector(credits + 1) for _ in range(3))
    next_id = 0
    for start, count, kind in chunks:
        records = _records(next_id, start, count, kind)

        def each(records: list[ConnectorMessage] = records) -> None:
            for r in records:
                one_by_one.send(r)

        def reference(records: list[ConnectorMessage] = records) -> None:
            for r in records:
                by_rules._queue_by_the_rules(r)

        expected = outcome(by_rules, reference)
        assert outcome(run, lambda records=records: run.send_messages(records)) == expected
        assert outcome(one_by_one, each) == expected
        next_id = max([next_id] + [r.message_id + 1 for r in records if r.message_id is not None])


def test_a_large_run_leaves_the_session_in_entries_a_payload_can_hold() -> None:
    """A run's entries are MessageBatch runs of at most RUN_ENTRY_BYTES of frames: a transport never splits one."""
    session = notified_connector(10_000)
    records = [ConnectorMessage(0, STREAM, m, None, None, bytes(1000)) for m in range(300)]
    session.send_messages(records)
    out = session.data_to_send()
    assert [type(frame) for frame, _ in out] == [MessageBatch] * len(out) and len(out) == 5
    assert all(len(data) <= RUN_ENTRY_BYTES for _, data in out)
    assert [r for frame, _ in out for r in frame] == records  # type: ignore[union-attr]
    assert b"".join(data for _, data in out) == b"".join(encode(r) for r in records)
    # A frame larger than an entry still goes, alone.
    session.send_messages([ConnectorMessage(0, STREAM, m, None, None, bytes(RUN_ENTRY_BYTES)) for m in (300, 301)])
    assert [len(frame) for frame, _ in session.data_to_send()] == [1, 1]  # type: ignore[arg-type]


def test_a_run_with_an_inconsistent_record_fails_as_sending_it_would() -> None:
    """A record whose fields contradict its flags is refused by the general encoder, run or not."""
    records = [ConnectorMessage(0, STREAM, m, None, None, b"x") for m in range(3)]
    records[1].key = b"k"  # a key without the KEY flag
    errors = []
    for send in ("run", "each"):
        session = notified_connector(10)
        try:
            if send == "run":
                session.send_messages(records)
            else:
                for r in records:
                    session.send(r)
        except Exception as exc:  # noqa: BLE001 - the comparison is the point
            errors.append((type(exc), str(exc), session.credits, len(session.data_to_send())))
    assert len(errors) == 2 and errors[0] == errors[1]
    assert errors[0][2:] == (8, 1)  # the record before the bad one went out
