"""A sender's local bounds: per-message streams awaiting ack, and queued bytes."""

from __future__ import annotations

from aqueduct.proto.config import ProtoConfig
from aqueduct.proto.events import (
    ChannelFinished,
    SendWindowOpened,
    StreamDataQueued,
)
from aqueduct.proto.pair import Delivered, Pair
from aqueduct.wire import Side, StreamSequenceDecoder
from aqueduct.wire.frames import MessageFrame
from aqueduct.wire.modes import Mode


def message_streams(actions: list) -> int:
    """How many of ``actions`` open a stream that carries a MESSAGE."""
    return sum(
        1
        for a in actions
        if isinstance(a, StreamDataQueued)
        and any(isinstance(f, MessageFrame) for f in StreamSequenceDecoder().feed(a.data))
    )


def unordered_pair(cap: int) -> Pair:
    p = Pair(ProtoConfig(max_open_streams=cap))
    p.handshake()
    p.client.set_mode(0, Mode.UNORDERED)
    return p


def test_unordered_sender_keeps_at_most_the_cap_of_streams_unacked():
    p = unordered_pair(4)
    sent = [p.client.send(0, [b"%d" % i], now=p.now)[1] for i in range(10)]
    assert sent == [True] * 4 + [False] * 6  # the window had room: only the cap held them
    first = p.client.transmit()
    assert message_streams(first) == 4
    p._deliver("client", "server", first)
    p.flush()  # the server's ACK_RELIABLE waits for its ack delay: nothing more leaves
    assert p.client.channel_stats(0).messages_sent == 4
    p.advance(0.5)  # acks arrive, the queue moves on, 4 streams at a time
    assert sorted(payloads(p)) == sorted(b"%d" % i for i in range(10))
    assert p.client.channel_stats(0).acked == 10
    assert p.of("client", SendWindowOpened) == [SendWindowOpened(0)]


def test_stream_cap_holds_in_every_round_trip():
    p = unordered_pair(3)
    for i in range(20):
        p.client.send(0, [b"%d" % i], now=p.now)
    unacked_peak = 0
    for _ in range(50):  # bounded: 20 messages at 3 per ack round need 7 rounds
        actions = p.client.transmit()
        stats = p.client.channel_stats(0)
        unacked_peak = max(unacked_peak, stats.messages_sent - stats.acked)
        p._deliver("client", "server", actions)
        p.advance(0.2)
        if len(payloads(p)) == 20:
            break
    assert unacked_peak == 3
    assert sorted(payloads(p)) == sorted(b"%d" % i for i in range(20))


def test_cap_is_per_channel():
    p = unordered_pair(2)
    x = p.client.new_channel(Side.CLIENT)
    p.client.send(0, [b"carrier"], attachments=[x], now=p.now)
    p.client.send(0, [b"a"], now=p.now)
    assert not p.client.send(0, [b"b"], now=p.now)[1]  # channel 0 is at its cap
    p.client.set_mode(x, Mode.UNORDERED)
    assert p.client.send(x, [b"on x 1"], now=p.now)[1]  # x has streams of its own
    assert p.client.send(x, [b"on x 2"], now=p.now)[1]
    p.settle()
    assert sorted(payloads(p, chanid=x)) == [b"on x 1", b"on x 2"]
    assert b"b" in payloads(p)


def test_finish_waits_for_capped_messages_then_finishes():
    p = unordered_pair(2)
    for i in range(7):
        p.client.send(0, [b"%d" % i], now=p.now)
    p.client.finish(0, p.now)
    p.settle()
    assert sorted(payloads(p)) == sorted(b"%d" % i for i in range(7))
    assert p.of("server", ChannelFinished) == [ChannelFinished(0)]


def test_reliable_queue_is_full_by_bytes():
    # window 10: every message after the first waits; the byte bound is 100
    p = Pair(ProtoConfig(max_queued_bytes=100), ProtoConfig(window=10), auto_dequeue=False)
    p.handshake()
    p.client.send(0, [b"x" * 20], now=p.now)
    assert not p.client.send(0, [b"y" * 60], now=p.now)[1]
    assert not p.client.send_blocked(0)  # 60 bytes queued
    assert not p.client.send(0, [b"z" * 60], now=p.now)[1]
    assert p.client.send_blocked(0)  # 120 bytes queued, far below max_queued messages
    p.flush()
    [first] = p.of("server", Delivered)
    p.server.dequeued(0, first.cost, p.now)
    p.advance(0.1)  # the 60-byte message leaves: 60 bytes queued, room again
    assert not p.client.send_blocked(0)
    assert p.of("client", SendWindowOpened) == [SendWindowOpened(0)]


def test_one_oversized_message_is_admitted_to_an_empty_queue():
    p = Pair(ProtoConfig(max_queued_bytes=100), ProtoConfig(window=10), auto_dequeue=False)
    p.handshake()
    p.client.send(0, [b"x" * 20], now=p.now)
    assert not p.client.send(0, [b"big" * 100], now=p.now)[1]  # 300 bytes, alone: queued
    assert not p.client.send_blocked(0)
    assert not p.client.send(0, [b"y"], now=p.now)[1]
    assert p.client.send_blocked(0)  # now it holds more than the bound


def payloads(p: Pair, side: str = "server", chanid: int = 0) -> list[bytes]:
    return [e.payload for e in p.of(side, Delivered) if e.chanid == chanid]
