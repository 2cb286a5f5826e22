"""Plain MESSAGE runs: the receiver's bulk path must deliver exactly what the per-frame path does."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aqueduct.proto.config import ProtoConfig
from aqueduct.proto.connection import ConnectionMachine
from aqueduct.proto.events import (
    ConnectionTerminated,
    DatagramQueued,
    MessagesReceived,
    StreamDataQueued,
)
from aqueduct.proto.flow import message_cost
from aqueduct.proto.pair import Pair
from aqueduct.wire.chanid import ENTRYPOINT
from aqueduct.wire.frames import (
    AttachmentRef,
    FinishSender,
    MessageFrame,
    RouteTo,
    encode_frame,
    read_plain_messages,
)
from aqueduct.wire.modes import Mode
from aqueduct.wire.sequence import StreamSequenceDecoder, encode_sequence

MAX = 1 << 20


def _frames(nums: list[int], payload: bytes = b"p", headers: tuple = ()) -> bytes:
    return b"".join(encode_frame(MessageFrame(n, headers, (), payload)) for n in nums)


def test_a_run_reads_consecutive_plain_messages_with_their_costs():
    nums = list(range(126, 131)) + list(range(16_382, 16_386))  # 1-, 2- and 3-byte numbers
    data = _frames(nums[:5]) + _frames(nums[5:])
    first, payloads, costs, end = read_plain_messages(data, 0, MAX)
    assert (first, payloads, end) == (126, [b"p"] * 5, len(_frames(nums[:5])))
    assert costs == [message_cost(MessageFrame(n, (), (), b"p")) for n in nums[:5]]
    first, payloads, _, end = read_plain_messages(data, end, MAX)  # the next run: 16382..
    assert (first, len(payloads), end) == (16_382, 4, len(data))
    wide = list(range((1 << 21) - 2, (1 << 21) + 2))  # 3-byte numbers, then 4-byte ones
    assert read_plain_messages(_frames(wide), 0, MAX)[:2] == (wide[0], [b"p"] * 4)


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        (_frames([3], headers=(("k", b"v"),)), "headers"),
        (encode_frame(MessageFrame(3, (), (AttachmentRef(9, ()),), b"p")), "attachments"),
        (_frames([4]), "number out of sequence"),
        (b"\x04\x83\x00\x00\x00\x01p", "non-minimal number"),
        (b"\x04\x83\x80\x00\x00\x00\x01p", "non-minimal 3-byte number"),
        (b"\x04\x03\x00\x00\x81\x00p", "non-minimal length"),
        (_frames([3])[:-1], "cut short"),
        (encode_frame(FinishSender(3)), "another frame"),
        (_frames([3], payload=b"x" * 100), "payload over the limit"),
    ],
)
def test_a_run_stops_before_anything_not_plain(tail, why):
    head = _frames([0, 1, 2])
    first, payloads, _, end = read_plain_messages(head + tail, 0, 50)
    assert (first, len(payloads), end) == (0, 3, len(head)), why


def _sent_stream(nums: int, payload_size: int) -> tuple[int, bytes, Pair]:
    """What a client core writes for ``nums`` messages (up to its window), not yet delivered."""
    pair = Pair()
    pair.handshake()
    for i in range(nums):
        pair.client.send(ENTRYPOINT, [bytes([i % 256]) * payload_size])
    actions = pair.client.transmit()
    writes = [a for a in actions if isinstance(a, StreamDataQueued)]
    return writes[0].stream_id, b"".join(a.data for a in writes), pair


def _collect(conn: ConnectionMachine) -> list[tuple[bytes, int]]:
    out = []
    while (event := conn.next_event()) is not None:
        if isinstance(event, MessagesReceived):
            out.extend(zip(event.payloads, event.costs, strict=True))
    return out


@settings(max_examples=40, deadline=None)
@given(
    nums=st.integers(1, 300),
    size=st.sampled_from([0, 1, 100, 200, 20_000]),
    cuts=st.lists(st.integers(1, 5000), max_size=40),
)
def test_any_chunking_delivers_every_message_once_in_order_with_its_cost(nums, size, cuts):
    sid, data, pair = _sent_stream(nums, size)
    sent = [f.payload for f in StreamSequenceDecoder().feed(data) if isinstance(f, MessageFrame)]
    receiver = pair.server
    got: list[tuple[bytes, int]] = []
    pos = 0
    for cut in cuts:
        receiver.receive_stream_data(sid, data[pos : pos + cut], False, 1.0)
        got += _collect(receiver)
        pos += cut
    receiver.receive_stream_data(sid, data[pos:], False, 1.0)
    got += _collect(receiver)
    assert [p for p, _ in got] == sent
    assert sum(c for _, c in got) == receiver.stats().bytes_received


def test_a_duplicate_number_inside_a_run_is_the_same_violation_as_alone():
    sid, data, pair = _sent_stream(3, 1)
    server = pair.server
    server.receive_stream_data(sid, data, False, 1.0)
    server.receive_stream_data(sid, _frames([3, 4, 2]), False, 1.0)  # 2 again, after a run
    closes = [e for e in iter(server.next_event, None) if isinstance(e, ConnectionTerminated)]
    assert closes and closes[0].reason == "MESSAGE: duplicate message number 2 on channel 0"


def test_a_run_past_sent_reliable_is_the_same_violation_as_alone():
    sid, data, pair = _sent_stream(2, 1)
    server = pair.server
    server.receive_stream_data(sid, data, False, 1.0)
    routed = encode_sequence([RouteTo(ENTRYPOINT), FinishSender(3)])
    server.receive_stream_data(sid + 4, routed, False, 1.0)  # FINISH_SENDER on a control stream
    server.receive_stream_data(sid, _frames([2, 3, 4]), False, 1.0)
    closes = [e for e in iter(server.next_event, None) if isinstance(e, ConnectionTerminated)]
    assert closes and closes[0].reason == (
        "MESSAGE: message number 3 on channel 0 is at or past SENT_RELIABLE 3"
    )


def test_after_the_route_a_chunk_of_plain_messages_is_one_run_event():
    sid, data, pair = _sent_stream(50, 100)
    server = pair.server
    server.receive_stream_data(sid, data[:300], False, 1.0)  # ROUTE_TO and a cut frame
    first = list(iter(server.next_event, None))
    server.receive_stream_data(sid, data[300:], False, 1.0)
    (run,) = list(iter(server.next_event, None))
    assert isinstance(run, MessagesReceived)
    assert len(run.payloads) + sum(len(e.payloads) for e in first) == 50


def test_a_plain_datagram_is_a_run_of_one_on_either_path():
    for logged in (False, True):
        log: list[dict] = []
        pair = Pair(server=ProtoConfig(frame_log=log.append) if logged else None)
        pair.handshake()
        pair.client.set_mode(ENTRYPOINT, Mode.UNRELIABLE)
        pair.client.send(ENTRYPOINT, [b"first"])  # (carries VERSION: general path)
        pair.flush()
        pair.client.send(ENTRYPOINT, [b"second"])
        (datagram,) = [a for a in pair.client.transmit() if isinstance(a, DatagramQueued)]
        pair.server.receive_datagram(datagram.data, 1.0)
        (event,) = list(iter(pair.server.next_event, None))
        assert isinstance(event, MessagesReceived), logged  # the frame log takes the general path
        assert event.payloads == [b"second"] and not event.headers and not event.attachments
        assert any(r.get("frame") == "MESSAGE" for r in log) == logged


def _plain_datagrams(values: list[bytes]) -> tuple[Pair, list[bytes]]:
    """A handshaken pair and the plain datagrams its client sends for ``values``, not delivered."""
    pair = Pair()
    pair.handshake()
    pair.client.set_mode(ENTRYPOINT, Mode.UNRELIABLE)
    pair.client.send(ENTRYPOINT, [b"first"])  # (carries VERSION: general path)
    pair.flush()
    for value in values:
        pair.client.send(ENTRYPOINT, [value])
    return pair, [a.data for a in pair.client.transmit() if isinstance(a, DatagramQueued)]


def test_plain_datagrams_read_in_one_batch_join_one_run_event():
    pair, datagrams = _plain_datagrams([b"a", b"b", b"c"])
    for datagram in datagrams:  # read back to back, no event taken in between
        pair.server.receive_datagram(datagram, 1.0)
    (event,) = list(iter(pair.server.next_event, None))
    assert isinstance(event, MessagesReceived) and event.payloads == [b"a", b"b", b"c"]
    assert len(event.costs) == 3


def test_a_run_event_never_changes_once_it_was_read():
    """Runs are gathered beside the queue and queued whole: a read event is final."""
    pair, (a, b, c) = _plain_datagrams([b"a", b"b", b"c"])
    pair.server.receive_datagram(a, 1.0)
    pair.server.receive_datagram(b, 1.0)
    early = pair.server.next_event()
    pair.server.receive_datagram(c, 1.0)  # the same channel, after the run was read
    late = pair.server.next_event()
    assert (early.payloads, late.payloads) == ([b"a", b"b"], [b"c"])
    assert pair.server.next_event() is None
