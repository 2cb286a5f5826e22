"""A read batch of datagrams in one call: ``receive_datagrams`` must equal ``receive_datagram`` on each.

The runtime hands the core every QUIC datagram of a read batch at once, and
the core delivers consecutive plain datagrams of a channel as one run. These
tests feed the same datagrams to two identical connections, one call per
datagram and in batches, and compare everything observable: events (runs
expanded into messages), parked events, counters, actions, timers, and what
the timers do next.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aqueduct.proto.connection import ConnectionMachine
from aqueduct.proto.events import (
    ConnectionTerminated,
    Event,
    MessagesReceived,
)
from aqueduct.proto.pair import Delivered
from aqueduct.wire import (
    AckVersion,
    AttachmentRef,
    ConnectionHeaders,
    FinishSender,
    Frame,
    MessageFrame,
    RouteTo,
    SentUnreliable,
    Side,
    Version,
    encode_frame,
    encode_sequence,
    make_chanid,
)
from aqueduct.wire.chanid import ENTRYPOINT

CH1 = make_chanid(Side.CLIENT, Side.CLIENT, False, 1)  # attached by a message on the entrypoint
NEW = make_chanid(Side.CLIENT, Side.CLIENT, False, 5)  # first seen in a datagram: parked
BIG = make_chanid(Side.CLIENT, Side.CLIENT, False, 40)  # a two-byte chanid: the general path
ONESHOT = make_chanid(Side.CLIENT, Side.CLIENT, True, 0)  # a datagram on it is a violation
UNKNOWN = make_chanid(Side.SERVER, Side.CLIENT, False, 7)  # "ours", never created: FORGET
LATE = 5  # entrypoint numbers below this are nacked before the batch: late drops
CH1_TOTAL = 8  # ch1's SENT_UNRELIABLE total when it got FINISH_SENDER
NOW = 1.5  # the batch's time: past the first receipt deadline (1 s)


def _server(late: bool, finish1: bool) -> ConnectionMachine:
    """A server core after a scripted client's handshake, ch1 attached, maybe nacks and a finish."""
    conn = ConnectionMachine(False)
    sids = iter(range(2, 1000, 4))  # the client's unidirectional streams

    def send(frames: list[Frame], now: float = 0.0) -> None:
        conn.receive_stream_data(next(sids), encode_sequence(frames), True, now)

    send([Version(), ConnectionHeaders(())])
    send([AckVersion()])
    send([RouteTo(ENTRYPOINT), MessageFrame(0, (), (AttachmentRef(CH1, ()),), b"attach")])
    if late:
        send([RouteTo(ENTRYPOINT), SentUnreliable(LATE)])
    if finish1:
        send([RouteTo(CH1), SentUnreliable(CH1_TOTAL), FinishSender(0)])
    conn.handle_timer(NOW)  # acks; the nacks of 0 .. LATE - 1 commit (their deadline passed)
    conn.transmit()
    while conn.next_event() is not None:
        pass
    return conn


def _datagram(chanid: int, num: int, payload: bytes = b"v", headers: tuple = ()) -> bytes:
    return encode_sequence([RouteTo(chanid), MessageFrame(num, headers, (), payload)])


_PAYLOADS = [b"", b"v", b"w" * 200]  # (200: a two-byte length)
_KINDS = ["plain0"] * 4 + ["plain1"] * 3 + [
    "dup0",
    "headers0",
    "trailing",
    "two",
    "version0",
    "new",
    "big",
    "oneshot",
    "unknown",
]


def _craft(items: list[tuple[str, int, int]], finish1: bool) -> list[bytes]:
    """Datagrams for (kind, number, payload index) items; ``dup0`` repeats the last entrypoint number."""
    out = []
    last0 = LATE
    for kind, num, p in items:
        payload = _PAYLOADS[p]
        if kind == "plain0":
            out.append(_datagram(ENTRYPOINT, num, payload))
            last0 = num
        elif kind == "plain1":
            out.append(_datagram(CH1, num % (CH1_TOTAL + 2) if finish1 else num, payload))
        elif kind == "dup0":
            out.append(_datagram(ENTRYPOINT, last0, payload))
        elif kind == "headers0":
            out.append(_datagram(ENTRYPOINT, num, payload, (("k", b"v"),)))
            last0 = num
        elif kind == "trailing":
            out.append(_datagram(ENTRYPOINT, num, payload) + b"\x00")
        elif kind == "two":  # two plain MESSAGEs in one datagram: a violation
            out.append(_datagram(ENTRYPOINT, num, payload) + encode_frame(MessageFrame(num + 1, (), (), b"")))
        elif kind == "version0":
            out.append(encode_sequence([Version(), RouteTo(ENTRYPOINT), MessageFrame(num, (), (), payload)]))
            last0 = num
        elif kind == "new":
            out.append(_datagram(NEW, num % 20, payload))
        elif kind == "big":
            out.append(_datagram(BIG, num % 20, payload))
        elif kind == "oneshot":
            out.append(_datagram(ONESHOT, 0, payload))
        else:
            out.append(_datagram(UNKNOWN, num, payload))
    return out


def _expand(events: list[Event]) -> list[Event | Delivered]:
    """Runs as their messages: how the two ways group messages into runs may differ, not what they deliver."""
    out: list[Event | Delivered] = []
    for event in events:
        if isinstance(event, MessagesReceived):
            assert len(event.payloads) == len(event.costs) > 0
            out.extend(
                Delivered(event.chanid, event.headers, event.attachments, payload, cost)
                for payload, cost in zip(event.payloads, event.costs, strict=True)
            )
        else:
            out.append(event)
    return out


def _observe(conn: ConnectionMachine) -> dict[str, Any]:
    """Everything a runtime (or a later step) could see of ``conn``; drains events and actions."""
    parked = conn._parking._groups  # (events of channels whose handle has not arrived)
    return {
        "events": _expand(list(iter(conn.next_event, None))),
        "parked": {c: _expand(group.events) for c, group in parked.items()},
        "stats": conn.stats(),
        "channels": {c: conn.channel_stats(c) for c in conn.channels},
        "actions": conn.transmit(),
        "timer": conn.get_timer(),
        "terminated": conn.terminated,
    }


def _history(conn: ConnectionMachine) -> list[dict[str, Any]]:
    """What ``conn`` shows now, then after each of its next few timers (acks, nacks, finishing)."""
    seen = [_observe(conn)]
    for _ in range(4):
        at = conn.get_timer()
        if at is None:
            break
        conn.handle_timer(at)
        seen.append(_observe(conn))
    return seen


def _chunks(datagrams: list[bytes], cuts: list[int]) -> list[list[bytes]]:
    out, pos = [], 0
    for cut in cuts:
        if pos >= len(datagrams):
            break
        out.append(datagrams[pos : pos + cut])
        pos += cut
    if pos < len(datagrams):
        out.append(datagrams[pos:])
    return out


@settings(max_examples=300, deadline=None)
@given(
    items=st.lists(
        st.tuples(
            st.sampled_from(_KINDS),
            st.one_of(st.integers(0, 9), st.integers(0, 300)),  # (low: late ones, duplicates)
            st.integers(0, len(_PAYLOADS) - 1),
        ),
        max_size=40,
    ),
    late=st.booleans(),
    finish1=st.booleans(),
    cuts=st.lists(st.integers(1, 40), max_size=6),
)
def test_batches_match_one_call_per_datagram(items, late, finish1, cuts):
    datagrams = _craft(items, finish1)
    one_by_one = _server(late, finish1)
    for data in datagrams:
        one_by_one.receive_datagram(data, NOW)
    batched = _server(late, finish1)
    for chunk in _chunks(datagrams, cuts):  # no cuts: the whole list in one call
        batched.receive_datagrams(chunk, NOW)
    assert _history(batched) == _history(one_by_one)


def _events(conn: ConnectionMachine) -> list[Event]:
    return list(iter(conn.next_event, None))


def test_a_batch_of_plain_datagrams_is_one_run_split_only_where_the_general_path_runs():
    conn = _server(late=False, finish1=False)
    conn.receive_datagrams(
        [
            _datagram(ENTRYPOINT, 0, b"a"),
            _datagram(ENTRYPOINT, 1, b"b"),
            _datagram(CH1, 0, b"x"),
            _datagram(CH1, 1, b"y"),
            encode_sequence([Version(), RouteTo(ENTRYPOINT), MessageFrame(2, (), (), b"c")]),
            _datagram(ENTRYPOINT, 3, b"h", (("k", b"v"),)),
            _datagram(ENTRYPOINT, 4, b"d"),
            _datagram(ENTRYPOINT, 5, b"e"),
        ],
        NOW,
    )
    run0, run1, version, headers, last = _events(conn)
    assert isinstance(run0, MessagesReceived) and run0.payloads == [b"a", b"b"]
    assert isinstance(run1, MessagesReceived) and run1.payloads == [b"x", b"y"]
    assert isinstance(version, MessagesReceived) and version.payloads == [b"c"]
    assert isinstance(headers, MessagesReceived) and headers.headers == (("k", b"v"),)
    assert headers.payloads == [b"h"]  # a message with headers is a run of one
    assert isinstance(last, MessagesReceived) and last.payloads == [b"d", b"e"]
    assert conn.stats().datagrams_received == 8


def test_a_violation_delivers_the_run_before_it_and_ignores_the_rest():
    conn = _server(late=False, finish1=False)
    datagrams = [_datagram(ENTRYPOINT, n, bytes([n])) for n in (1, 2, 1, 3)]  # 1 again: a violation
    conn.receive_datagrams(datagrams, NOW)
    run, close = _events(conn)
    assert isinstance(run, MessagesReceived) and run.payloads == [b"\x01", b"\x02"]
    assert isinstance(close, ConnectionTerminated) and close.error_code == 1
    assert close.reason == "MESSAGE: duplicate unreliable message number 1 on channel 0"
    assert conn.stats().datagrams_received == 3  # the violating one counted, the one after not
    conn.receive_datagrams([_datagram(ENTRYPOINT, 9)], NOW)  # closed: ignored
    assert _events(conn) == [] and conn.stats().messages_received == 3  # (and the attaching one)


def test_late_datagrams_inside_a_run_are_dropped_and_counted():
    conn = _server(late=True, finish1=False)
    conn.receive_datagram(_datagram(ENTRYPOINT, LATE), NOW)
    conn.receive_datagrams([_datagram(ENTRYPOINT, n, bytes([n])) for n in (1, 6, 2, 7)], NOW)
    (run,) = _events(conn)  # the batch's run joined the one before it
    assert isinstance(run, MessagesReceived) and run.payloads == [b"v", b"\x06", b"\x07"]
    stats = conn.stats()
    assert (stats.late_dropped, stats.datagrams_received, stats.messages_received) == (2, 5, 4)


def test_two_plain_messages_in_one_datagram_are_a_violation_not_a_run():
    """A datagram is exactly [VERSION] ROUTE_TO MESSAGE; the plain path once delivered both."""
    conn = _server(late=False, finish1=False)
    extra = encode_frame(MessageFrame(1, (), (), b"b"))
    conn.receive_datagrams([_datagram(ENTRYPOINT, 0, b"a") + extra], NOW)
    (close,) = _events(conn)
    assert isinstance(close, ConnectionTerminated)
    assert close.reason == f"datagram: {len(extra)} bytes after the MESSAGE"
