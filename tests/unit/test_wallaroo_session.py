"""The Wallaroo v3 worker session, sans-IO: handshake, NOTIFY_ACK points, records, credits, errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aqueduct.connector.events import HelloAccepted, RecordsAccepted, SessionEnded, StreamNotified
from aqueduct.connector.frames import (
    BOUNDARY,
    EOS,
    EVENT_TIME,
    KEY,
    UNSTABLE_REFERENCE,
    ConnectorMessage,
)
from aqueduct.connector.inbound import DurableStream
from aqueduct.connector.wallaroo.frames import (
    NO_POINT,
    EndOfStream,
    NotifyAck,
    WallarooAck,
    WallarooError,
    WallarooFrameSplitter,
    WallarooHello,
    WallarooMessage,
    WallarooNotify,
    WallarooOk,
    WallarooRestart,
    encode,
)
from aqueduct.connector.wallaroo.worker_session import WallarooSession, from_v3, to_v3
from aqueduct.connector.worker_session import WorkerConfig

HELLO = WallarooHello("0.0.1", b"", "prog", "inst")


def make(durable: tuple[DurableStream, ...] = (), credits: int = 8, cookie: bytes = b"") -> WallarooSession:
    return WallarooSession(WorkerConfig(cookie=cookie, initial_credits=credits), lambda p, i: durable)


def feed(session: WallarooSession, *frames: object) -> list:
    """Feed frames; the sink opens every NOTIFYed stream, as the bridge's ingest does."""
    events = session.receive_data(b"".join(f if isinstance(f, bytes) else encode(f) for f in frames))
    for e in events:
        if isinstance(e, StreamNotified):
            session.stream_opened(e.stream_id)
    return events


def replies(session: WallarooSession) -> list:
    return WallarooFrameSplitter().feed(session.data_to_send())


def streaming(durable: tuple[DurableStream, ...] = (), credits: int = 8) -> WallarooSession:
    session = make(durable, credits)
    feed(session, HELLO)
    assert replies(session) == [WallarooOk(credits)]
    return session


def test_points_convert_between_inclusive_and_exclusive() -> None:
    assert [to_v3(p) for p in (0, 1, 42)] == [NO_POINT, 0, 41]
    assert [from_v3(p) for p in (NO_POINT, 0, 41)] == [0, 1, 42]


def test_hello_is_answered_with_ok_carrying_only_credits() -> None:
    session = make(credits=5)
    assert feed(session, HELLO) == [HelloAccepted("prog", "inst", 5, ())]
    assert replies(session) == [WallarooOk(5)]


def test_notify_of_a_new_stream_acks_nothing_held() -> None:
    session = streaming()
    assert feed(session, WallarooNotify(1, "s", NO_POINT)) == [StreamNotified(1, "s", 0)]
    assert replies(session) == [WallarooAck(1), NotifyAck(True, 1, NO_POINT)]  # NOTIFY's credit back at once


def test_notify_ack_waits_for_the_sink_and_a_refusal_ends_only_that_stream() -> None:
    session = streaming()
    events = session.receive_data(encode(WallarooNotify(1, "s", NO_POINT)) + encode(WallarooNotify(2, "t", NO_POINT)))
    assert events == [StreamNotified(1, "s", 0), StreamNotified(2, "t", 0)]
    assert replies(session) == [WallarooAck(2)]  # no answer before the sink's
    assert session.refuse_stream(1, "stream 1 belongs to connector 'a/1', not 'prog/inst'") == []
    session.stream_opened(1)  # too late: refused
    session.stream_opened(2)
    assert replies(session) == [NotifyAck(False, 1, NO_POINT), NotifyAck(True, 2, NO_POINT)]
    assert feed(session, WallarooMessage(2, 0, payload=b"x")) == [RecordsAccepted(2, (ConnectorMessage(0, 2, 0, None, None, b"x"),))]
    assert not session.ended
    feed(session, WallarooMessage(1, 0, payload=b"y"))  # the refused stream may not be sent on
    assert replies(session)[-1] == WallarooError(
        "MESSAGE for stream 1, which is not open (NOTIFY it and wait for NOTIFY_ACK first)"
    )


def test_notify_ack_carries_the_durable_point_and_older_ids_are_dropped() -> None:
    session = streaming((DurableStream(1, "s", 42),))
    assert feed(session, WallarooNotify(1, "s", NO_POINT)) == [StreamNotified(1, "s", 42)]
    assert replies(session)[-1] == NotifyAck(True, 1, 41)  # the last id held, inclusive
    events = feed(session, WallarooMessage(1, 40), WallarooMessage(1, 41), WallarooMessage(1, 42, payload=b"x"))
    assert events == [RecordsAccepted(1, (ConnectorMessage(0, 1, 42, None, None, b"x"),))]
    assert replies(session) == [WallarooAck(2)]  # the two duplicates' credits


def test_a_connector_point_above_the_workers_wins() -> None:
    session = streaming((DurableStream(1, "s", 10),))
    assert feed(session, WallarooNotify(1, "s", 99)) == [StreamNotified(1, "s", 100)]
    assert replies(session)[-1] == NotifyAck(True, 1, 99)


def test_messages_become_records_and_eos_a_boundary_that_costs_nothing() -> None:
    session = streaming(credits=4)
    feed(session, WallarooNotify(1, "s", NO_POINT))
    events = feed(
        session,
        WallarooMessage(1, 0, 1_700_000_000_000_000, b"k", b"p"),
        WallarooMessage(1, 3),
        EndOfStream(1),
    )
    assert events == [
        RecordsAccepted(
            1,
            (
                ConnectorMessage(EVENT_TIME | KEY, 1, 0, 1_700_000_000_000_000, b"k", b"p"),
                ConnectorMessage(0, 1, 3, None, None, b""),  # empty payload: none, but not a boundary
                ConnectorMessage(EOS | BOUNDARY | UNSTABLE_REFERENCE, 1, 3, None, None, None),
            ),
        )
    ]
    replies(session)
    # The ingest returns a credit per record, the EOS one included; that one is kept back.
    session.ack([(1, 4)], credits=3)
    assert replies(session) == [WallarooAck(2, ((1, 3),))]
    feed(session, WallarooMessage(1, 4))  # the stream is closed
    assert replies(session)[-1] == WallarooError(
        "MESSAGE for stream 1, which is not open (NOTIFY it and wait for NOTIFY_ACK first)"
    )


def test_acks_drop_points_that_say_nothing() -> None:
    session = streaming()
    session.ack([(1, 0), (2, 5)], credits=0)
    assert replies(session) == [WallarooAck(0, ((2, 4),))]
    session.ack([(1, 0)], credits=0)
    assert replies(session) == []


def test_restart_sends_the_address_and_ends_the_session() -> None:
    session = streaming()
    assert session.restart("127.0.0.1:7001") == [SessionEnded("restart requested", "restart")]
    assert replies(session) == [WallarooRestart("127.0.0.1:7001")]
    assert session.ended and feed(session, WallarooNotify(1, "s", NO_POINT)) == []


NOT_OPEN = "NOTIFY it and wait for NOTIFY_ACK first)"
BAD_INPUT = [
    ([WallarooHello("0.0.2", b"", "p", "i")], "unsupported protocol version: got 0.0.2, expected 0.0.1"),
    ([WallarooHello("0.0.1", b"x", "p", "i")], "bad cookie: this worker expects no cookie"),
    ([WallarooNotify(1, "s", 0)], "NOTIFY frame not allowed in state connected"),
    ([HELLO, HELLO], "HELLO frame not allowed in state streaming"),
    ([HELLO, WallarooOk(1)], "OK frame may not be sent to a worker"),
    ([HELLO, NotifyAck(True, 1, 0)], "NOTIFY_ACK frame may not be sent to a worker"),
    ([HELLO, bytes([0, 0, 0, 1, 9])], "unknown frame tag 9"),
    (
        [HELLO, bytes([0, 0, 0, 1, 203])],
        "frame tag 203 is a two-phase-commit frame, not part of a source connection",
    ),
    (
        [HELLO, bytes([0, 0, 0, 8, 8]) + bytes(7)],  # truncated: a 7-byte stream id
        "EOS_MESSAGE: body ends inside stream id (needs 8 bytes, 7 left)",
    ),
    ([HELLO, (5 * 1024 * 1024).to_bytes(4, "big")], "frame too large: 5242880 > 4194304"),
    ([HELLO, WallarooMessage(1, 0)], "MESSAGE for stream 1, which is not open (" + NOT_OPEN),
    ([HELLO, EndOfStream(1)], "EOS_MESSAGE for stream 1, which is not open (" + NOT_OPEN),
    (
        [HELLO, WallarooNotify(1, "s", NO_POINT), WallarooMessage(1, 0, -5)],
        "MESSAGE: event time -5 is negative (the bridge stores microseconds since the Unix epoch)",
    ),
]


@pytest.mark.parametrize(("frames", "reason"), BAD_INPUT, ids=[r for _, r in BAD_INPUT])
def test_bad_input_gets_the_exact_error_and_ends_the_session(frames: list, reason: str) -> None:
    session = make()
    events = feed(session, *frames)
    assert events[-1] == SessionEnded(reason, "local")
    assert replies(session)[-1] == WallarooError(reason)
    assert session.ended
    assert feed(session, HELLO) == []  # nothing else is read


def test_a_bad_cookie_is_not_echoed() -> None:
    session = make(cookie=b"secret")
    feed(session, WallarooHello("0.0.1", b"guess", "p", "i"))
    assert replies(session) == [WallarooError("bad cookie")]


def test_messages_before_a_bad_frame_are_still_reported() -> None:
    session = streaming()
    feed(session, WallarooNotify(1, "s", NO_POINT))
    events = feed(session, WallarooMessage(1, 0, payload=b"a"), bytes([0, 0, 0, 1, 201]))
    assert events[0] == RecordsAccepted(1, (ConnectorMessage(0, 1, 0, None, None, b"a"),))
    assert isinstance(events[1], SessionEnded)


def test_spending_more_credits_than_granted_is_an_error() -> None:
    session = streaming(credits=2)
    feed(session, WallarooNotify(1, "s", NO_POINT))  # its credit comes back at once
    events = feed(session, WallarooMessage(1, 0), WallarooMessage(1, 1), WallarooMessage(1, 2))
    assert events[-1] == SessionEnded("credit exceeded", "local")
    assert len(events[0].records) == 2


def test_the_peer_may_end_the_session_with_error() -> None:
    session = streaming()
    assert feed(session, WallarooError("bye")) == [SessionEnded("bye", "peer")]


@given(st.integers(0, 50), st.lists(st.integers(0, 60), max_size=40))
def test_only_ids_above_the_point_are_kept_and_every_dropped_one_gets_its_credit(
    durable: int, ids: list[int]
) -> None:
    session = streaming((DurableStream(1, "s", durable),), credits=len(ids) + 1)
    feed(session, WallarooNotify(1, "s", NO_POINT))
    replies(session)
    events = feed(session, *(WallarooMessage(1, i) for i in ids))
    kept = [m.message_id for e in events for m in e.records]
    point, expected = durable, []
    for i in ids:
        if i >= point:
            expected.append(i)
            point = i + 1
    assert kept == expected
    returned = sum(a.credits for a in replies(session))
    assert returned == len(ids) - len(kept)
    assert session.streams[1].points.point == point


ids = st.integers(0, 5)
connector_frames = st.lists(
    st.one_of(
        st.builds(WallarooNotify, ids, st.just("s"), st.sampled_from([NO_POINT, 0, 3])),
        st.builds(WallarooMessage, ids, st.integers(0, 8), st.integers(-1, 2), st.binary(max_size=2)),
        st.builds(EndOfStream, ids),
        st.just(WallarooError("bye")),
        st.just(WallarooOk(1)),
    ),
    max_size=25,
)


@given(connector_frames, st.integers(1, 6))
def test_any_frame_sequence_ends_cleanly_and_never_overgrants_credits(frames: list, credits: int) -> None:
    session = streaming(credits=credits)
    spendable = credits  # what the connector may spend, by its own count
    for frame in frames:
        events = feed(session, frame)
        out = replies(session)
        if isinstance(frame, (WallarooNotify, WallarooMessage)):
            spendable -= 1
        spendable += sum(a.credits for a in out if isinstance(a, WallarooAck))
        assert spendable >= 0 or out[-1] == WallarooError("credit exceeded")
        assert spendable <= credits  # returned credits never exceed what was spent
        if session.ended:
            assert isinstance(events[-1], SessionEnded)
            break
        for event in events:
            if isinstance(event, RecordsAccepted):  # the sink returns their credits later
                session.ack((), len(event.records))
                spendable += sum(a.credits for a in replies(session))
        assert spendable <= credits
