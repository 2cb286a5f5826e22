"""Sans-IO connector session and outbound buffering, and a connector<->worker simulation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aqueduct.connector.connector_session import ConnectorSession, NoCredits
from aqueduct.connector.events import (
    Acked,
    RecordsAccepted,
    RestartRequested,
    SessionAccepted,
    SessionEnded,
)
from aqueduct.connector.frames import (
    EOS,
    EPHEMERAL,
    PROTOCOL_VERSION,
    Ack,
    ConnectorMessage,
    Error,
    Hello,
    Notify,
    Ok,
    Restart,
    StreamRef,
    encode,
)
from aqueduct.connector.inbound import DurableStream
from aqueduct.connector.outbound import ORDERED, UNORDERED, UNRELIABLE, OutboundStream, Outbox
from aqueduct.connector.states import (
    CONNECTION_TRANSITIONS,
    STREAM_TRANSITIONS,
    ConnectionState,
    IllegalTransition,
    StreamState,
    step,
)
from aqueduct.connector.worker_session import WorkerConfig, WorkerSession
from aqueduct.proto.errors import LocalProtocolError
from aqueduct.wire.rangeset import RangeSet
from tests.connector_link import Link


def sent(session: ConnectorSession) -> list:
    return [frame for frame, _ in session.data_to_send()]


def streaming(credits: int = 10) -> ConnectorSession:
    session = ConnectorSession("gen", "gen-1", b"c")
    session.start()
    session.receive_data(encode(Ok(credits, ())))
    session.data_to_send()
    return session


def test_handshake() -> None:
    session = ConnectorSession("gen", "gen-1", b"c")
    session.start()
    assert sent(session) == [Hello(PROTOCOL_VERSION, b"c", "gen", "gen-1")]
    refs = (StreamRef(1, "s", 4),)
    assert session.receive_data(encode(Ok(5, refs))) == [SessionAccepted(5, refs)]
    assert session.credits == 5 and session.state is ConnectionState.STREAMING


def test_costly_frames_need_credits_and_open_streams() -> None:
    session = streaming(credits=2)
    with pytest.raises(LocalProtocolError, match="stream 1: message not allowed in state start"):
        session.send(ConnectorMessage(0, 1, 0, payload=b""))
    session.send(Notify(1, "s", 0))
    session.send(ConnectorMessage(EOS, 1, 0, payload=b""))
    with pytest.raises(NoCredits):
        session.send(Notify(1, "s", 1))
    assert session.receive_data(encode(Ack(1, ((1, 1),)))) == [Acked(1, ((1, 1),))]
    with pytest.raises(LocalProtocolError, match="message not allowed in state closed"):
        session.send(ConnectorMessage(0, 1, 1, payload=b""))
    session.send(Notify(1, "s", 1))
    assert session.streams[1] is StreamState.OPEN


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (Hello(PROTOCOL_VERSION, b"", "p", "i"), "HELLO frame may not be sent to a connector"),
        (Notify(1, "s", 0), "NOTIFY frame may not be sent to a connector"),
        (Ok(1, ()), "OK frame not allowed in state streaming"),
    ],
)
def test_worker_violations_get_error(frame, reason: str) -> None:
    session = streaming()
    assert session.receive_data(encode(frame)) == [SessionEnded(reason, "local")]
    assert sent(session) == [Error(reason)]


def test_restart_and_error_from_worker() -> None:
    session = streaming()
    session.send(Notify(1, "s", 0))
    events = session.receive_data(encode(Restart()))
    assert events == [RestartRequested(), SessionEnded("restart requested by worker", "restart")]
    assert session.streams[1] is StreamState.TERMINATED
    refused = ConnectorSession("p", "i")
    refused.start()
    assert refused.receive_data(encode(Error("bad cookie"))) == [SessionEnded("bad cookie", "peer")]


def test_connector_gives_up_with_error() -> None:
    session = streaming()
    assert session.fail("source unavailable") == [SessionEnded("source unavailable", "local")]
    assert sent(session) == [Error("source unavailable")]
    assert session.fail("again") == [] and session.ended


def test_transition_tables_refuse_everything_unlisted() -> None:
    whats = {w for _, w in CONNECTION_TRANSITIONS}
    for state in ConnectionState:
        for what in whats:
            if (state, what) not in CONNECTION_TRANSITIONS:
                with pytest.raises(IllegalTransition):
                    step(CONNECTION_TRANSITIONS, state, what)
    for state in StreamState:
        for what in {w for _, w in STREAM_TRANSITIONS}:
            if (state, what) not in STREAM_TRANSITIONS:
                with pytest.raises(IllegalTransition):
                    step(STREAM_TRANSITIONS, state, what)


# ---------------------------------------------------------------- outbound


def test_stream_ids_auto_increment_and_unordered_must_be_consecutive() -> None:
    stream = OutboundStream(1, "s", UNORDERED, next_id=5)
    assert stream.make_message(b"a").message_id == 5
    with pytest.raises(LocalProtocolError, match="message id 9 must be consecutive"):
        stream.make_message(b"b", message_id=9)
    ordered = OutboundStream(2, "t", ORDERED)
    assert ordered.make_message(b"a", message_id=10).message_id == 10
    with pytest.raises(LocalProtocolError, match="message id 3 must increase"):
        ordered.make_message(b"b", message_id=3)


@given(st.lists(st.binary(max_size=4), min_size=1, max_size=4), st.none() | st.integers(0, 2**64 - 1), st.booleans())
def test_the_stream_builds_data_records_as_build_makes_them(
    payloads: list[bytes], event_time: int | None, ephemeral: bool
) -> None:
    """The stream builds data records without a keyword call each: the records ``build`` makes."""
    one, run = OutboundStream(1, "s", next_id=7), OutboundStream(1, "s", next_id=7)
    built = [
        ConnectorMessage.build(1, p, message_id=None if ephemeral else 7 + i, event_time=event_time)
        for i, p in enumerate(payloads)
    ]
    assert [one.make_message(p, None, event_time, ephemeral) for p in payloads] == built
    assert run.make_messages(payloads, [event_time] * len(payloads), ephemeral) == built
    assert list(one.unacked) == list(run.unacked) == ([] if ephemeral else built)


def test_unreliable_streams_carry_only_unbuffered_ephemeral_messages() -> None:
    stream = OutboundStream(3, "u", UNRELIABLE)
    with pytest.raises(LocalProtocolError):
        stream.make_message(b"x")
    m = stream.make_message(b"x", ephemeral=True)
    assert m.flags == EPHEMERAL and m.message_id is None and not stream.unacked


def test_resume_skips_durable_messages_but_keeps_them_until_acked() -> None:
    """OK's point says what is durable (not re-sent); only ACK says what is committed."""
    stream = OutboundStream(1, "s")
    msgs = [stream.make_message(bytes([i])) for i in range(5)]
    stream.on_ack(1)
    assert stream.acked == 1
    notify, resend = stream.resume(3)
    assert notify == Notify(1, "s", 3) and resend == msgs[3:]
    assert stream.resume_from == 3
    assert stream.acked == 1 and list(stream.unacked) == msgs[1:]  # 1, 2: durable, not committed
    stream.on_ack(4)
    assert stream.acked == 4 and list(stream.unacked) == msgs[4:]


@given(st.lists(st.integers(1, 3), max_size=40), st.lists(st.integers(-2, 60), max_size=6))
def test_an_ack_drops_exactly_the_records_below_its_point(steps: list[int], points: list[int]) -> None:
    """Ids along the buffer increase, one by one or skipping (a resume moved the next id)."""
    stream = OutboundStream(1, "s")
    for stride in steps:
        stream.next_id += stride - 1
        stream.make_message(b"x")
    for point in points:
        kept = [m for m in stream.unacked if m.message_id >= point]  # type: ignore[operator]
        stream.on_ack(point)
        assert list(stream.unacked) == kept


def test_after_a_new_ok_the_streams_resends_take_turns_oldest_first() -> None:
    """Every NOTIFY first, then a share of the OK's credits per stream per turn, each turn one run on the wire."""
    outbox = Outbox()
    for sid in (1, 2):
        outbox.streams[sid] = OutboundStream(sid, f"s{sid}")
        outbox.streams[sid].make_messages([b"x"] * 40, None, False)
    outbox.connected((), credits=64)  # two streams: turns of 32
    frames = [item if isinstance(item, Notify) else (item[0].stream_id, item[0].message_id, len(item))
              for item in outbox.take(len(outbox))]  # fmt: skip
    assert frames[:2] == [Notify(1, "s1", 0), Notify(2, "s2", 0)]
    turns = [(sid, first) for sid, first, _ in frames[2:] if first % 32 == 0]
    assert turns == [(1, 0), (2, 0), (1, 32), (2, 32)]
    assert sum(n for _, _, n in frames[2:]) == 80
    outbox.connected((), credits=64)
    session = streaming(credits=100)
    outbox.send_into(session)
    runs = [(f.stream_id, f.first_id, len(f)) for f, _ in session.data_to_send() if not isinstance(f, Notify)]
    assert runs == [(1, 0, 32), (2, 0, 32), (1, 32, 8), (2, 32, 8)]


def test_finished_stream_is_not_renotified() -> None:
    stream = OutboundStream(1, "s")
    stream.keep([ConnectorMessage.build(1, b"a", message_id=stream.claim(1, False), eos=True)])
    assert stream.resume(None) is not None  # EOS not yet acked: re-send it
    assert stream.resume(1) is None  # the EOS is durable: nothing to re-send
    assert stream.unacked  # ... but kept until committed
    stream.on_ack(1)
    assert stream.resume(1) is None and not stream.unacked


# ---------------------------------------------------------------- simulation


class DurableLog:
    """A worker-side 'durable' store: what survives connections."""

    def __init__(self) -> None:
        self.rows: dict[int, list[bytes]] = {}
        self.ids: dict[int, RangeSet] = {}

    def lookup(self, program: str, instance: str) -> list[DurableStream]:
        return [DurableStream(sid, f"s{sid}", ids.base, ids) for sid, ids in self.ids.items()]

    def store(self, event: RecordsAccepted) -> list[tuple[int, int]]:
        ids = self.ids.setdefault(event.stream_id, RangeSet())
        for m in event.records:
            self.rows.setdefault(event.stream_id, []).append(m.payload)
            ids.add(m.message_id)
        return [(event.stream_id, ids.base)]


@settings(max_examples=60, deadline=None)
@given(
    total=st.integers(1, 30),
    credits=st.integers(2, 8),
    faults=st.lists(st.tuples(st.sampled_from(["drop", "restart", "step"]), st.integers(1, 60)), max_size=6),
    batch=st.integers(1, 5),
)
def test_faults_never_lose_or_duplicate(total: int, credits: int, faults: list, batch: int) -> None:
    """Connector and worker machines over a lossy 'link': every message lands exactly once.

    ``batch`` > 1 queues runs (``send_many``'s way), which the outbox splits
    where the credits end and the session sends in one step.
    """
    log = DurableLog()
    outbox = Outbox()
    payloads = [f"m{i}".encode() for i in range(total)]
    created = 0
    faults = [*faults, ("step", 10_000)]

    for kind, budget in faults:
        link = Link(outbox, WorkerSession(WorkerConfig(initial_credits=credits), log.lookup))
        worker = link.worker
        for _ in range(budget):
            for event in link.to_worker():
                if isinstance(event, RecordsAccepted):
                    worker.ack(log.store(event), credits=len(event.records))
            link.to_connector()
            if link.conn.ended:
                break
            if 1 not in outbox.streams:
                outbox.open(1, "s1", ORDERED)
            stream = outbox.streams[1]
            while created < total and len(outbox) < credits:
                n = min(batch, total - created)
                if n == 1:
                    outbox.push([stream.make_message(payloads[created])])
                else:
                    outbox.push(stream.make_messages(payloads[created : created + n], None, False))
                created += n
            link.send()
            if created == total and not stream.unacked and not link.in_flight:
                break
        if kind == "restart" and worker.state is ConnectionState.STREAMING:
            worker.restart()
            link.to_connector()
        # "drop" and the end of "step": the connection dies with bytes in flight.
    assert log.rows.get(1, []) == payloads
