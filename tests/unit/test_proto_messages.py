"""Two real ``Connection`` objects over the in-memory ``Pair``: handshake, modes, endings, flow."""

from __future__ import annotations

from aqueduct.proto.config import ProtoConfig
from aqueduct.proto.connection import ConnectionMachine
from aqueduct.proto.events import (
    ChannelCancelled,
    ChannelFinished,
    ConnectionCloseQueued,
    ConnectionTerminated,
    DatagramQueued,
    HandshakeCompleted,
    MessagesAcked,
    MessagesReceived,
    ReceiverWasClosed,
    SendWindowOpened,
    StreamDataQueued,
    StreamResetQueued,
)
from aqueduct.proto.pair import Delivered, Pair
from aqueduct.wire import (
    AckVersion,
    ConnectionHeaders,
    Side,
    StreamSequenceDecoder,
    Version,
    decode_datagram,
)
from aqueduct.wire.modes import Mode


def payloads(p: Pair, side: str = "server", chanid: int = 0) -> list[bytes]:
    return [e.payload for e in p.of(side, Delivered) if e.chanid == chanid]


def frames_of(data: bytes) -> list:
    return StreamSequenceDecoder().feed(data)


# ---------------------------------------------------------------- handshake


def test_handshake_exchanges_headers_once_and_acks_version():
    p = Pair(ProtoConfig(headers=(("content-type", b"application/cbor"),)),
             ProtoConfig(headers=(("server", b"x"),)))
    p.client.initiate(0.0)
    first = p.client.transmit()
    assert len(first) == 1 and first[0].stream_id == 2 and first[0].end_stream
    assert [type(f) for f in frames_of(first[0].data)] == [Version, ConnectionHeaders]
    p.server.receive_stream_data(2, first[0].data, True, 0.0)
    answer = p.server.transmit()
    assert [a.stream_id for a in answer] == [3]
    assert [type(f) for f in frames_of(answer[0].data)] == [Version, AckVersion, ConnectionHeaders]
    p.client.receive_stream_data(3, answer[0].data, True, 0.0)
    # the client owes ACK_VERSION and, having received ACK_VERSION, drops VERSION
    owed = p.client.transmit()
    assert [type(f) for f in frames_of(owed[0].data)] == [AckVersion]
    assert p.server.peer_headers == (("content-type", b"application/cbor"),)
    assert p.client.peer_headers == (("server", b"x"),)
    ev = p.client.next_event()
    assert isinstance(ev, HandshakeCompleted) and ev.peer_headers == (("server", b"x"),)


def test_sequences_carry_version_until_ack_version_arrives():
    c = ConnectionMachine(True)
    c.initiate(0.0)
    c.set_mode(0, Mode.UNRELIABLE)
    c.send(0, [b"early"])
    dgram = [a for a in c.transmit() if isinstance(a, DatagramQueued)][0]
    assert isinstance(decode_datagram(dgram.data)[0], Version)


def test_routed_frames_wait_for_peer_headers():
    p = Pair()
    p.client.initiate(0.0)
    p.client.send(0, [b"m0"])
    actions = p.client.transmit()
    # deliver the entrypoint stream before the headers stream
    for a in reversed(actions):
        p.server.receive_stream_data(a.stream_id, a.data, a.end_stream, 0.0)
    kinds = []
    while (ev := p.server.next_event()) is not None:
        kinds.append(type(ev))
    assert kinds == [HandshakeCompleted, MessagesReceived]


def test_window_header_sets_the_peer_send_window():
    p = Pair(server=ProtoConfig(window=100))
    p.handshake()
    for _ in range(20):
        p.client.send(0, [b"x" * 28], now=p.now)
    sent = p.client.stats().messages_sent
    assert sent == 3  # 3 x 33 bytes fit in 100
    assert p.client.stats().window_stalls == 17


# ---------------------------------------------------------------- modes


def test_ten_thousand_ordered_messages_arrive_in_order():
    p = Pair()
    p.handshake()
    expected = [b"%d" % i for i in range(10_000)]
    for m in expected:
        p.client.send(0, [m], now=p.now)
    p.flush()
    p.client.finish(0, p.now)
    p.settle()
    assert payloads(p) == expected
    assert p.of("server", ChannelFinished) == [ChannelFinished(0)]
    assert sum(e.acked for e in p.of("client", MessagesAcked)) == 10_000
    assert p.client.channel_count() == 0 and p.server.channel_count() == 0


def test_ordered_batches_one_write_per_stream_per_transmit():
    p = Pair()
    p.handshake()
    for i in range(100):
        p.client.send(0, [b"m%d" % i], now=p.now)
    actions = p.client.transmit()
    assert len(actions) == 1 and isinstance(actions[0], StreamDataQueued)


def test_unordered_all_delivered_one_stream_each():
    p = Pair(reverse_streams=True)
    p.handshake()
    p.client.set_mode(0, Mode.UNORDERED)
    for i in range(50):
        p.client.send(0, [b"u%d" % i], now=p.now)
    actions = p.client.transmit()
    streams = [a for a in actions if isinstance(a, StreamDataQueued)]
    assert len(streams) == 50 and all(a.end_stream for a in streams)
    p._deliver("client", "server", actions)  # reverse_streams: the last stream arrives first
    p.flush()
    got = payloads(p)
    assert sorted(got) == sorted(b"u%d" % i for i in range(50))
    assert got[0] == b"u49"  # they really arrived out of order


def test_finish_racing_unordered_messages():
    p = Pair(reverse_streams=True)  # FINISH_SENDER's stream is delivered before the messages
    p.handshake()
    p.client.set_mode(0, Mode.UNORDERED)
    for i in range(20):
        p.client.send(0, [b"%d" % i], now=p.now)
    p.client.finish(0, p.now)
    p.settle()
    assert len(payloads(p)) == 20
    events = p.events["server"]
    assert isinstance(events[-1], ChannelFinished)
    assert p.server.channel_count() == 0 and p.client.channel_count() == 0


def test_unreliable_with_scripted_loss_acks_or_nacks_each_number_once():
    lost = {1, 4, 5, 9}
    p = Pair(datagrams=lambda side, i, d: "drop" if side == "client" and i in lost else "deliver",
             rtt=0.02)
    p.handshake()
    p.client.set_mode(0, Mode.UNRELIABLE)
    for i in range(12):
        p.client.send(0, [b"%d" % i], now=p.now)
    p.flush()
    assert payloads(p) == [b"%d" % i for i in range(12) if i not in lost]
    p.advance(0.05)
    assert p.of("client", MessagesAcked) == []  # before the receipt deadline nothing is covered
    p.advance(0.2)
    acks = p.of("client", MessagesAcked)
    assert sum(a.acked for a in acks) == 8 and sum(a.nacked for a in acks) == 4
    stats = p.client.stats()
    assert stats.acked == 8 and stats.nacked == 4
    assert p.server.stats().acks_sent == 8 and p.server.stats().nacks_sent == 4
    p.client.finish(0, p.now)
    p.settle()
    assert p.of("server", ChannelFinished) == [ChannelFinished(0)]


def test_late_datagram_after_nack_is_dropped():
    p = Pair(datagrams=lambda side, i, d: "hold" if side == "client" and i == 0 else "deliver")
    p.handshake()
    p.client.set_mode(0, Mode.UNRELIABLE)
    p.client.send(0, [b"late"], now=p.now)
    p.client.send(0, [b"on time"], now=p.now)
    p.flush()
    p.advance(2.0)  # 1 s receipt deadline without an RTT sample
    assert sum(a.nacked for a in p.of("client", MessagesAcked)) == 1
    p.release_held()
    assert payloads(p) == [b"on time"]
    assert p.server.stats().late_dropped == 1


def test_unreliable_falls_back_to_a_stream_when_too_big():
    p = Pair()
    p.handshake()
    p.client.set_mode(0, Mode.UNRELIABLE)
    p.client.set_max_datagram_size(100)
    p.client.send(0, [b"x" * 500], now=p.now)
    actions = p.client.transmit()
    assert not any(isinstance(a, DatagramQueued) for a in actions)
    p._deliver("client", "server", actions)
    p.flush()
    assert payloads(p) == [b"x" * 500]
    assert p.client.stats().fallback_streams == 1


def test_unreliable_queue_evicts_oldest():
    p = Pair(ProtoConfig(max_queued=2), ProtoConfig(window=50))
    p.handshake()
    p.client.set_mode(0, Mode.UNRELIABLE)
    results = [p.client.send(0, [b"%02d" % i + b"x" * 30], now=p.now)[1] for i in range(5)]
    assert results == [True, False, False, False, False]
    assert p.client.stats().evicted == 2
    assert not p.client.send_blocked(0)  # unreliable senders never block


# ---------------------------------------------------------------- endings


def test_cancel_drops_undequeued_and_resets_streams():
    p = Pair(auto_dequeue=False)
    p.handshake()
    p.client.set_mode(0, Mode.UNORDERED)
    for i in range(3):
        p.client.send(0, [b"%d" % i], now=p.now)
    p.flush()
    p.client.set_mode(0, Mode.ORDERED)
    p.client.send(0, [b"ordered"], now=p.now)
    p.client.cancel(0, p.now)
    actions = p.client.transmit()
    resets = [a for a in actions if isinstance(a, StreamResetQueued)]
    assert resets and all(r.error_code == 1 for r in resets)
    p._deliver("client", "server", actions)
    p.settle()
    assert p.of("server", ChannelCancelled) == [ChannelCancelled(0)]
    assert p.client.channel_count() == 0 and p.server.channel_count() == 0


def test_close_receiver_fails_the_sender():
    p = Pair()
    p.handshake()
    p.client.send(0, [b"a"], now=p.now)
    p.flush()
    p.server.close_receiver(0, p.now)
    p.flush()
    assert p.of("client", ReceiverWasClosed) == [ReceiverWasClosed(0)]
    assert p.client.channel_count() == 0 and p.server.channel_count() == 0
    try:
        p.client.send(0, [b"b"], now=p.now)
    except Exception as e:  # noqa: BLE001 - the exact class is the point
        assert type(e).__name__ == "LocalProtocolError"
    else:
        raise AssertionError("send after ReceiverWasClosed must fail")


def test_finished_sender_learns_completion():
    p = Pair()
    p.handshake()
    p.client.send(0, [b"a"], now=p.now)
    p.client.finish(0, p.now)
    p.settle()
    assert p.of("client", ChannelFinished) == [ChannelFinished(0)]


def test_application_close_sends_code_2():
    p = Pair()
    p.handshake()
    p.client.close(p.now, "bye")
    actions = p.client.transmit()
    assert ConnectionCloseQueued(2, "bye") in actions
    assert ConnectionTerminated(2, "bye", by_peer=False) in [
        e for e in iter(p.client.next_event, None)
    ]


# ---------------------------------------------------------------- oneshot


def test_oneshot_sends_message_then_finish_on_one_stream():
    p = Pair()
    p.handshake()
    tx = p.client.new_channel(Side.CLIENT, oneshot=True)
    p.client.send(0, [b"carrier"], attachments=[tx], now=p.now)
    p.flush()
    p.client.send(tx, [b"only"], now=p.now)
    actions = p.client.transmit()
    assert len(actions) == 1 and actions[0].end_stream
    p._deliver("client", "server", actions)
    p.settle()
    assert payloads(p, chanid=tx) == [b"only"]
    assert ChannelFinished(tx) in p.of("server", ChannelFinished)
    try:
        p.client.send(tx, [b"again"], now=p.now)
    except Exception as e:  # noqa: BLE001
        assert type(e).__name__ == "LocalProtocolError"
    else:
        raise AssertionError("a oneshot carries one message")


# ---------------------------------------------------------------- flow control


def test_sender_stops_at_the_window_and_resumes_on_dequeued():
    window = 1000
    p = Pair(server=ProtoConfig(window=window), auto_dequeue=False)
    p.handshake()
    results = [p.client.send(0, [b"x" * 95], now=p.now)[1] for i in range(30)]  # cost 100
    assert results[:10] == [True] * 10 and results[10:] == [False] * 20
    p.flush()
    got = p.of("server", Delivered)
    assert len(got) == 10
    # the application dequeues: DEQUEUED goes back once W0/4 bytes are unreported
    for ev in got[:3]:
        p.server.dequeued(0, ev.cost, p.now)
    p.flush()
    assert len(p.of("server", Delivered)) == 13
    # below W0/4 the report waits for the 50 ms timer
    p.server.dequeued(0, got[3].cost, p.now)
    p.flush()
    assert len(p.of("server", Delivered)) == 13
    p.advance(0.06)
    assert len(p.of("server", Delivered)) == 14
    p.auto_dequeue = True
    for ev in p.of("server", Delivered)[4:]:
        p.server.dequeued(0, ev.cost, p.now)
    p.settle()
    assert len(p.of("server", Delivered)) == 30
    assert SendWindowOpened(0) in p.of("client", SendWindowOpened)


def test_a_lone_message_is_acked_and_reported_dequeued_in_one_write():
    """A message now and then (a producer's record twice a second) costs the receiver one write back, not two.

    DEQUEUED is due after 50 ms and ACK_RELIABLE after 100 ms: each went in
    its own packet (and QUIC acked each), twice the packets per record.
    """
    p = Pair()
    p.handshake()
    assert p.client.send(0, [b"record"], now=p.now)[1]
    p.flush()  # delivered and dequeued at once (auto_dequeue), acked by nobody yet
    assert len(p.of("server", Delivered)) == 1
    due = p.server.get_timer()
    assert due == p.now + ProtoConfig().dequeued_delay  # the earlier of the two bounds
    p.server.handle_timer(due)
    writes = [a for a in p.server.transmit() if isinstance(a, StreamDataQueued)]
    assert len(writes) == 1
    kinds = {type(f).__name__ for f in StreamSequenceDecoder().feed(writes[0].data)}
    assert {"Dequeued", "AckReliable"} <= kinds
    assert p.server.get_timer() is None  # nothing left for the 100 ms ack timer to send


def test_oversized_message_is_sent_when_nothing_is_outstanding():
    p = Pair(server=ProtoConfig(window=10))
    p.handshake()
    assert p.client.send(0, [b"x" * 100], now=p.now)[1]
    assert not p.client.send(0, [b"y"], now=p.now)[1]
    p.settle()
    assert payloads(p) == [b"x" * 100, b"y"]


def test_reliable_sender_blocks_when_queue_full():
    p = Pair(ProtoConfig(max_queued=3), ProtoConfig(window=10), auto_dequeue=False)
    p.handshake()
    p.client.send(0, [b"x" * 20], now=p.now)
    for _ in range(3):
        assert not p.client.send(0, [b"y"], now=p.now)[1]
    assert p.client.send_blocked(0)
    p.flush()
    [first] = p.of("server", Delivered)
    p.server.dequeued(0, first.cost, p.now)
    p.advance(0.1)  # DEQUEUED (after its 50 ms) lets one more message out: no longer full
    assert not p.client.send_blocked(0)
    assert p.of("client", SendWindowOpened) == [SendWindowOpened(0)]


# ---------------------------------------------------------------- observability


def test_frame_log_and_counters():
    log: list[dict] = []
    p = Pair(ProtoConfig(frame_log=log.append))
    p.handshake()
    p.client.send(0, [b"abc"], headers=(("k", b"v"),), now=p.now)
    p.settle()
    sent = [r for r in log if r["direction"] == "sent" and r["frame"] == "MESSAGE"]
    assert sent and sent[0]["payload_len"] == 3 and sent[0]["num"] == 0
    assert any(r["direction"] == "received" and r["frame"] == "ACK_RELIABLE" for r in log)
    assert p.client.stats().messages_sent == 1
    assert p.server.stats().messages_received == 1
    assert p.client.channel_stats(0).acked == 1


def test_receipt_deadline_is_one_second_before_an_rtt_sample_then_twice_rtt():
    p = Pair(datagrams=lambda side, i, d: "drop" if side == "client" and i < 2 else "deliver")
    p.handshake()
    p.client.set_mode(0, Mode.UNRELIABLE)
    p.client.send(0, [b"lost"], now=p.now)
    p.advance(0.9)
    assert not p.of("client", MessagesAcked)
    p.advance(0.2)
    assert sum(a.nacked for a in p.of("client", MessagesAcked)) == 1
    p.server.set_rtt(0.3)  # deadline max(2 x 0.3, 0.1) = 0.6 s
    p.client.send(0, [b"lost too"], now=p.now)
    p.client.send(0, [b"kept"], now=p.now)
    p.advance(0.5)
    assert sum(a.nacked for a in p.of("client", MessagesAcked)) == 1
    p.advance(0.2)
    assert sum(a.nacked for a in p.of("client", MessagesAcked)) == 2
    assert sum(a.acked for a in p.of("client", MessagesAcked)) == 1


def test_frame_log_covers_prefix_frames():
    log: list[dict] = []
    p = Pair(ProtoConfig(frame_log=log.append))
    p.handshake()
    sent = [r["frame"] for r in log if r["direction"] == "sent"]
    assert sent[:2] == ["VERSION", "CONNECTION_HEADERS"]
    received = [r["frame"] for r in log if r["direction"] == "received"]
    assert received[:3] == ["VERSION", "ACK_VERSION", "CONNECTION_HEADERS"]


# ---------------------------------------------------------------- local misuse


def test_local_misuse_raises_local_protocol_error():
    import pytest

    from aqueduct.proto.errors import LocalProtocolError

    p = Pair()
    p.handshake()
    rx = p.client.new_channel(Side.SERVER)  # the client holds the receiver
    tx = p.client.new_channel(Side.CLIENT)
    cases = [
        lambda: p.server.send(0, [b"the server receives the entrypoint"]),
        lambda: p.client.send(rx, [b"we hold the receiver of rx"]),
        lambda: p.client.send(tx, [b"tx is not attached yet"]),
        lambda: p.client.finish(tx, p.now),
        lambda: p.client.send(0, [b""], attachments=[0]),
        lambda: p.client.send(0, [b""], attachments=[12345]),
        lambda: p.server.initiate(p.now),
        lambda: p.client.close_receiver(0, p.now),
        lambda: p.client.channel_stats(999),
    ]
    for case in cases:
        with pytest.raises(LocalProtocolError):
            case()
    p.client.send(0, [b"carrier"], attachments=[tx], now=p.now)
    with pytest.raises(LocalProtocolError, match="attached only once"):
        p.client.send(0, [b"again"], attachments=[tx], now=p.now)
    p.client.finish(tx, p.now)
    with pytest.raises(LocalProtocolError, match="send after finished"):
        p.client.send(tx, [b"late"], now=p.now)
    with pytest.raises(LocalProtocolError, match="oneshot"):
        p.client.set_mode(p.client.new_channel(Side.CLIENT, oneshot=True), Mode.UNRELIABLE)
    p.settle()
    assert not p.closes


def test_queued_unreliable_messages_are_announced_when_they_leave():
    p = Pair(server=ProtoConfig(window=100), auto_dequeue=False)
    p.handshake()
    p.client.set_mode(0, Mode.UNRELIABLE)
    for i in range(6):
        p.client.send(0, [b"%d" % i + b"x" * 40], now=p.now)  # two fit the window
    p.flush()
    for ev in p.of("server", Delivered):
        p.server.dequeued(0, ev.cost, p.now)
    p.advance(0.1)  # DEQUEUED returns credit: queued datagrams leave during that flush
    for ev in p.of("server", Delivered)[2:]:
        p.server.dequeued(0, ev.cost, p.now)
    p.advance(2.0)
    assert len(p.of("server", Delivered)) == 6
    # every datagram was announced by SENT_UNRELIABLE, so every number got covered (acked)
    assert sum(a.acked for a in p.of("client", MessagesAcked)) == 6
