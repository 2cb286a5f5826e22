"""Sans-IO worker session: handshake, errors, credits, streams, deduplication."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aqueduct.connector.events import (
    HelloAccepted,
    RecordsAccepted,
    SessionEnded,
    StreamNotified,
)
from aqueduct.connector.frames import (
    EOS,
    EPHEMERAL,
    PROTOCOL_VERSION,
    UNSTABLE_REFERENCE,
    Ack,
    ConnectorMessage,
    Error,
    FrameSplitter,
    Hello,
    Notify,
    Ok,
    Restart,
    StreamRef,
    encode,
)
from aqueduct.connector.inbound import DurableStream
from aqueduct.connector.states import ConnectionState
from aqueduct.connector.worker_session import WorkerConfig, WorkerSession
from aqueduct.wire.modes import Mode
from aqueduct.wire.rangeset import RangeSet

HELLO = Hello(PROTOCOL_VERSION, b"", "gen", "gen-1")


def msg(stream_id: int, mid: int | None, payload: bytes = b"x", flags: int = 0) -> ConnectorMessage:
    return ConnectorMessage(flags, stream_id, mid, payload=payload)


def replies(session: WorkerSession) -> list:
    return FrameSplitter().feed(session.data_to_send())


def started(config: WorkerConfig | None = None, durable=None) -> WorkerSession:
    session = WorkerSession(config, durable) if durable else WorkerSession(config)
    session.receive_data(encode(HELLO))
    session.data_to_send()
    return session


def accepted_ids(events: list) -> list[int | None]:
    return [m.message_id for e in events if isinstance(e, RecordsAccepted) for m in e.records]


def test_handshake_answers_ok_with_credits_and_durable_points() -> None:
    durable = [DurableStream(1, "orders/0", 42), DurableStream(7, "orders/1", 0)]
    seen = []

    def lookup(program: str, instance: str):
        seen.append((program, instance))
        return durable

    session = WorkerSession(WorkerConfig(initial_credits=64), lookup)
    events = session.receive_data(encode(HELLO))
    refs = (StreamRef(1, "orders/0", 42), StreamRef(7, "orders/1", 0))
    assert seen == [("gen", "gen-1")]
    assert events == [HelloAccepted("gen", "gen-1", 64, refs)]
    assert replies(session) == [Ok(64, refs)]
    assert session.state is ConnectionState.STREAMING


@pytest.mark.parametrize(
    ("config", "hello", "reason"),
    [
        (WorkerConfig(), Hello("1.0", b"", "p", "i"), "unsupported protocol version: 1.0"),
        (WorkerConfig(cookie=b"right"), Hello(PROTOCOL_VERSION, b"wrong", "p", "i"), "bad cookie"),
        (WorkerConfig(cookie=b"right"), Hello(PROTOCOL_VERSION, b"", "p", "i"), "bad cookie"),
        (
            WorkerConfig(),
            Hello(PROTOCOL_VERSION, b"unexpected", "p", "i"),
            "bad cookie: this worker expects no cookie",
        ),
    ],
    ids=["version", "wrong-cookie", "missing-cookie", "cookie-to-cookieless-worker"],
)
def test_refused_hello_gets_exact_error_and_ends(
    config: WorkerConfig, hello: Hello, reason: str
) -> None:
    session = WorkerSession(config)
    events = session.receive_data(encode(hello) + encode(Notify(1, "s", 0)))
    out = session.data_to_send()
    assert FrameSplitter().feed(out) == [Error(reason)]
    assert b"right" not in out  # the expected cookie is never echoed
    assert events == [SessionEnded(reason, "local")]
    assert session.ended
    assert session.receive_data(encode(HELLO)) == [] and session.data_to_send() == b""


def test_accepted_hello_with_right_cookie() -> None:
    session = WorkerSession(WorkerConfig(cookie=b"s3cret"))
    events = session.receive_data(encode(Hello(PROTOCOL_VERSION, b"s3cret", "p", "i")))
    assert isinstance(events[0], HelloAccepted)


@pytest.mark.parametrize(
    ("before", "data", "reason"),
    [
        (False, encode(Notify(1, "s", 0)), "NOTIFY frame not allowed in state connected"),
        (True, encode(HELLO), "HELLO frame not allowed in state streaming"),
        (True, encode(Ack(1, ())), "ACK frame may not be sent to a worker"),
        (True, encode(Ok(1, ())), "OK frame may not be sent to a worker"),
        (True, encode(Restart()), "RESTART frame may not be sent to a worker"),
        (True, encode(msg(9, 0)), "message for unknown stream 9"),
        (True, bytes.fromhex("000000015a"), "unknown frame tag 0x5a"),
        (True, (5_000_000).to_bytes(4, "big"), "frame too large: 5000000 > 4194304"),
        (True, bytes.fromhex("0000000b4d00030000000000000001"), "invalid message flags 0x0003 (EPHEMERAL|BOUNDARY): EPHEMERAL with BOUNDARY"),
    ],
)
def test_violations_get_exact_error(before: bool, data: bytes, reason: str) -> None:
    session = started() if before else WorkerSession()
    events = session.receive_data(data)
    assert FrameSplitter().feed(session.data_to_send()) == [Error(reason)]
    assert events[-1] == SessionEnded(reason, "local")


def test_frames_before_a_violation_are_not_lost() -> None:
    session = started()
    data = encode(Notify(1, "s", 0)) + encode(msg(1, 0)) + encode(msg(1, 1)) + encode(msg(2, 0))
    events = session.receive_data(data)
    assert events == [
        StreamNotified(1, "s", 0),
        RecordsAccepted(1, (msg(1, 0), msg(1, 1))),
        SessionEnded("message for unknown stream 2", "local"),
    ]


def test_credit_exceeded() -> None:
    session = started(WorkerConfig(initial_credits=3))
    data = encode(Notify(1, "s", 0)) + b"".join(encode(msg(1, i)) for i in range(3))
    events = session.receive_data(data)
    assert accepted_ids(events) == [0, 1]
    assert events[-1] == SessionEnded("credit exceeded", "local")
    assert Error("credit exceeded") in replies(session)


def test_granted_credits_allow_more_frames() -> None:
    session = started(WorkerConfig(initial_credits=2))
    session.receive_data(encode(Notify(1, "s", 0)) + encode(msg(1, 0)))
    session.ack([(1, 1)], credits=1)
    assert Ack(1, ((1, 1),)) in replies(session)
    assert accepted_ids(session.receive_data(encode(msg(1, 1)))) == [1]


def test_notify_credit_is_returned_at_once_message_credit_by_the_sink() -> None:
    session = started(WorkerConfig(initial_credits=2))
    session.receive_data(encode(Notify(1, "s", 0)) + encode(msg(1, 0)))
    assert replies(session) == [Ack(1, ())]


def test_eos_closes_then_notify_reopens() -> None:
    session = started()
    session.receive_data(encode(Notify(1, "s", 0)) + encode(msg(1, 0, flags=EOS)))
    events = session.receive_data(encode(Notify(1, "s", 1)) + encode(msg(1, 1)))
    assert accepted_ids(events) == [1]
    session.receive_data(encode(msg(1, 2, flags=EOS)))
    events = session.receive_data(encode(msg(1, 3)))
    assert events[-1] == SessionEnded("message for unknown stream 1", "local")


def test_decreasing_ids_on_in_order_input_are_refused_not_dropped() -> None:
    session = started()
    frames = encode(Notify(1, "s", 0)) + encode(msg(1, 2)) + encode(msg(1, 0))
    events = session.receive_data(frames)
    assert accepted_ids(events) == [2]
    assert events[-1].reason == "MESSAGE: id 0 not above 2 on stream 1 (ids must increase)"


def test_renotify_restarts_the_id_sequence_and_drops_duplicates() -> None:
    session = started()
    session.receive_data(encode(Notify(1, "s", 0)) + encode(msg(1, 0)) + encode(msg(1, 1)))
    events = session.receive_data(encode(Notify(1, "s", 0)) + encode(msg(1, 0)) + encode(msg(1, 2)))
    assert accepted_ids(events) == [2]


def test_resume_drops_what_the_worker_already_holds() -> None:
    session = started(durable=lambda p, i: [DurableStream(1, "s", 3)])
    events = session.receive_data(
        encode(Notify(1, "s", 0)) + b"".join(encode(msg(1, i)) for i in range(6))
    )
    assert events[0] == StreamNotified(1, "s", 3)
    assert accepted_ids(events) == [3, 4, 5]
    assert session.streams[1].point_of_reference == 6


def test_durable_ids_above_the_point_are_deduplicated_too() -> None:
    held = RangeSet()
    held.add_range(5, 7)
    session = started(durable=lambda p, i: [DurableStream(1, "s", 3, held)])
    payloads = encode(Notify(1, "s", 3)) + b"".join(encode(msg(1, i)) for i in range(3, 9))
    events = session.receive_payload(payloads, mode=Mode.UNORDERED)
    assert accepted_ids(events) == [3, 4, 7, 8]


def test_unordered_input_is_deduplicated_by_the_range_set() -> None:
    session = started()
    session.receive_payload(encode(Notify(1, "s", 0)), mode=Mode.ORDERED, stream_modes=[Mode.UNORDERED])
    got = []
    for mid in [2, 0, 2, 3, 1, 0, 4]:
        got += accepted_ids(session.receive_payload(encode(msg(1, mid)), mode=Mode.UNORDERED, channel_stream=1))
    assert got == [2, 0, 3, 1, 4]
    assert session.streams[1].point_of_reference == 5


def test_unordered_messages_sent_before_eos_may_arrive_after_it() -> None:
    session = started()
    session.receive_payload(encode(Notify(1, "s", 0)), mode=Mode.ORDERED, stream_modes=[Mode.UNORDERED])
    events = session.receive_payload(encode(msg(1, 1, flags=EOS)) + encode(msg(1, 0)), mode=Mode.UNORDERED)
    assert accepted_ids(events) == [1, 0]


def test_ordered_point_advances_over_skipped_ids() -> None:
    session = started()
    session.receive_data(encode(Notify(1, "s", 0)) + encode(msg(1, 10)) + encode(msg(1, 20)))
    assert session.streams[1].point_of_reference == 21


def test_unstable_and_ephemeral_never_move_the_point() -> None:
    session = started()
    frames = [
        Notify(1, "s", 0),
        msg(1, 0),
        msg(1, 1, flags=UNSTABLE_REFERENCE),
        msg(1, 5, flags=UNSTABLE_REFERENCE),
        msg(1, None, flags=EPHEMERAL),
    ]
    events = session.receive_data(b"".join(encode(f) for f in frames))
    assert accepted_ids(events) == [0, 1, 5, None]
    assert session.streams[1].point_of_reference == 1
    session.receive_data(encode(msg(1, 6)))
    assert session.streams[1].point_of_reference == 7


def test_payload_channel_carries_only_its_stream() -> None:
    session = started()
    session.receive_payload(encode(Notify(1, "s", 0)) + encode(Notify(2, "t", 0)), mode=Mode.ORDERED)
    events = session.receive_payload(encode(msg(2, 0)), mode=Mode.ORDERED, channel_stream=1)
    assert events[-1].reason == "MESSAGE frame on the channel of stream 1: only that stream's MESSAGE frames go there"


def test_payload_must_hold_whole_frames() -> None:
    session = started()
    events = session.receive_payload(encode(Notify(1, "s", 0))[:-1], mode=Mode.ORDERED)
    assert events[-1].reason == "payload ends inside a frame (23 bytes left)"


def test_restart_and_peer_error_end_the_session() -> None:
    session = started()
    assert session.restart() == [SessionEnded("restart requested", "restart")]
    assert replies(session) == [Restart()]
    assert session.receive_data(encode(Notify(1, "s", 0))) == []
    other = started()
    assert other.receive_data(encode(Error("bye"))) == [SessionEnded("bye", "peer")]
    assert other.connection_lost() == []
    third = started()
    assert third.connection_lost() == [SessionEnded("connection closed", "closed")]


@settings(deadline=None)
@given(
    n=st.integers(1, 40),
    order=st.randoms(use_true_random=False),
    dups=st.lists(st.integers(0, 39), max_size=20),
    chunk=st.integers(1, 50),
)
def test_unordered_with_duplicates_accepts_each_id_once(
    n: int, order, dups: list[int], chunk: int
) -> None:
    ids = list(range(n)) + [d for d in dups if d < n]
    order.shuffle(ids)
    session = started(WorkerConfig(initial_credits=1000))
    session.receive_payload(encode(Notify(1, "s", 0)), mode=Mode.ORDERED, stream_modes=[Mode.UNORDERED])
    got = []
    for i in range(0, len(ids), chunk):
        payload = b"".join(encode(msg(1, mid)) for mid in ids[i : i + chunk])
        got += accepted_ids(session.receive_payload(payload, mode=Mode.UNORDERED))
    assert sorted(got) == list(range(n))
    assert session.streams[1].point_of_reference == n


@settings(deadline=None)
@given(st.binary(max_size=200))
def test_garbage_after_handshake_ends_with_an_error_or_waits(data: bytes) -> None:
    session = started()
    events = session.receive_data(data)
    if session.ended:
        assert isinstance(events[-1], SessionEnded)
        assert isinstance(FrameSplitter().feed(session.data_to_send())[-1], Error)


def test_a_notify_takes_the_mode_of_the_channel_its_payload_attaches() -> None:
    """Modes arrive with the payload that carries the NOTIFYs, one per NOTIFY, in order."""
    session = started()
    payload = encode(Notify(1, "a", 0)) + encode(Notify(2, "b", 0)) + encode(Notify(3, "c", 0))
    events = session.receive_payload(
        payload, mode=Mode.ORDERED, stream_modes=[Mode.UNORDERED, Mode.UNRELIABLE]
    )
    modes = {e.stream_id: e.mode for e in events if isinstance(e, StreamNotified)}
    assert modes == {1: Mode.UNORDERED, 2: Mode.UNRELIABLE, 3: Mode.ORDERED}  # none given: TCP's
