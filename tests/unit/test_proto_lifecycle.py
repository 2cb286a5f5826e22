"""Spec section 5: channel trees, lost-in-transit detection and cleanup, FORGET_CHANNEL.

Every scenario ends by checking that both sides freed their channel tables:
lost channels must not leak state anywhere.
"""

from __future__ import annotations

from aqueduct.proto.events import (
    ChannelCancelled,
    ChannelFinished,
    ChannelLost,
    DatagramQueued,
    ReceiverWasClosed,
    StreamDataQueued,
)
from aqueduct.proto.pair import Delivered, Pair
from aqueduct.wire import Side
from aqueduct.wire.modes import Mode


def received(p: Pair, side: str, chanid: int) -> list[Delivered]:
    return [e for e in p.of(side, Delivered) if e.chanid == chanid]


def assert_empty(p: Pair) -> None:
    for side in ("client", "server"):
        conn = p.conn(side)
        assert conn.channel_count() == 0, (side, dict(conn.channels))
        assert conn.tracking_count() == 0, side


def finish_entrypoint(p: Pair) -> None:
    p.client.finish(0, p.now)
    p.settle()


def test_three_level_channel_tree():
    p = Pair()
    p.handshake()
    a = p.client.new_channel(Side.SERVER)  # client creates, server sends on it
    p.client.send(0, [b"here is a"], attachments=[a], now=p.now)
    p.flush()
    [m] = received(p, "server", 0)
    assert [x.chanid for x in m.attachments] == [a]
    b = p.server.new_channel(Side.CLIENT)  # server creates, client sends on it
    p.server.send(a, [b"here is b"], attachments=[b], now=p.now)
    p.flush()
    [m] = received(p, "client", a)
    assert m.attachments[0].chanid == b
    c = p.client.new_channel(Side.SERVER)
    p.client.send(b, [b"here is c"], attachments=[c], now=p.now)
    p.flush()
    [m] = received(p, "server", b)
    assert m.attachments[0].chanid == c
    p.server.send(c, [b"deep"], now=p.now)
    p.flush()
    assert [e.payload for e in received(p, "client", c)] == [b"deep"]
    for conn, chanid in ((p.server, c), (p.client, b), (p.server, a)):
        conn.finish(chanid, p.now)
    finish_entrypoint(p)
    assert {e.chanid for e in p.of("client", ChannelFinished)} >= {a, c}
    assert {e.chanid for e in p.of("server", ChannelFinished)} >= {0, b}
    assert not p.of("client", ChannelLost) and not p.of("server", ChannelLost)
    assert_empty(p)


def test_handle_on_a_dropped_unreliable_message_is_lost():
    p = Pair(datagrams=lambda side, i, d: "drop" if i == 0 else "deliver", rtt=0.01)
    p.handshake()
    p.client.set_mode(0, Mode.UNRELIABLE)
    x = p.client.new_channel(Side.CLIENT)
    p.client.send(0, [b"carrier"], attachments=[x], now=p.now)
    p.client.send(x, [b"on x"], now=p.now)  # x's own frames reach the server
    p.flush()
    assert x in p.server.channels  # created by the early ROUTE_TO
    p.advance(0.5)
    assert p.of("client", ChannelLost) == [ChannelLost(x)]
    assert x not in p.server.channels  # FORGET_CHANNEL reached the server
    finish_entrypoint(p)
    assert_empty(p)


def _datagram_ahead_of_its_announcement(p: Pair) -> tuple[int, list[StreamDataQueued]]:
    """An unreliable carrier of a new channel x reaches the server (read at once); its
    SENT_UNRELIABLE, on a stream, is held back. Returns (x, the held stream writes)."""
    p.handshake()
    p.client.set_mode(0, Mode.UNRELIABLE)
    x = p.client.new_channel(Side.CLIENT)
    p.client.send(0, [b"carrier"], attachments=[x], now=p.now)
    held: list[StreamDataQueued] = []
    for _ in range(20):  # the announcement follows on the client's timer
        for action in p.client.transmit():
            if isinstance(action, DatagramQueued):
                p.server.receive_datagram(action.data, p.now)
            elif isinstance(action, StreamDataQueued):
                held.append(action)
        p.flush()  # the server's side only: the client has nothing else to send
        if any(b"\x05" in a.data for a in held):  # a SENT_UNRELIABLE frame is held
            break
        t = p.client.get_timer()
        assert t is not None
        p.now = t
        p.client.handle_timer(p.now)
    assert [e.payload for e in received(p, "server", 0)] == [b"carrier"]
    return x, held


def test_a_datagram_read_before_its_announcement_is_acked_by_the_close_not_nacked():
    """The close waits for SENT_UNRELIABLE: the carrier is acked, so x is not lost."""
    p = Pair(rtt=0.01)
    x, held = _datagram_ahead_of_its_announcement(p)
    p.server.close_receiver(0, p.now)  # the application read the carrier, then closed
    assert 0 in p.server.channels  # held: closing now would nack what was read
    for action in held:
        p.server.receive_stream_data(action.stream_id, action.data, action.end_stream, p.now)
    p.settle()
    assert p.of("client", ReceiverWasClosed) == [ReceiverWasClosed(0)]
    assert not p.of("client", ChannelLost)  # before the fix: [ChannelLost(x)]
    assert 0 not in p.server.channels
    p.client.finish(x, p.now)
    p.settle()
    assert ChannelFinished(x) in p.of("server", ChannelFinished)
    assert_empty(p)


def test_a_datagram_arriving_while_the_close_is_held_is_nacked_and_its_handle_lost():
    """Once the application closed, a new datagram is not received: the close nacks it.

    Its attached channel is then lost for the sender, as for a datagram
    still in transit; before, the closed receiver took it in and the
    runtime cancelled the channel it carried (interop: lost-in-transit
    under reorder saw Cancelled instead of LostInTransit).
    """
    p = Pair(rtt=0.01)
    x, held = _datagram_ahead_of_its_announcement(p)
    p.server.close_receiver(0, p.now)  # held: the carrier's announcement has not come
    y = p.client.new_channel(Side.CLIENT)
    p.client.send(0, [b"late carrier"], attachments=[y], now=p.now)
    for action in p.client.transmit():  # its datagram arrives during the hold, the rest is held too
        if isinstance(action, DatagramQueued):
            p.server.receive_datagram(action.data, p.now)
        elif isinstance(action, StreamDataQueued):
            held.append(action)
    for action in held:
        p.server.receive_stream_data(action.stream_id, action.data, action.end_stream, p.now)
    p.advance(1.0)
    # Never handed to the closed receiver's application (whose runtime would cancel y) ...
    assert [e.payload for e in received(p, "server", 0)] == [b"carrier"]
    assert p.of("client", ChannelLost) == [ChannelLost(y)]  # ... but nacked: y is lost
    assert y not in p.server.channels
    p.client.finish(x, p.now)
    p.settle()
    assert ChannelFinished(x) in p.of("server", ChannelFinished)  # the carrier read before the close still counts


def test_a_close_held_for_an_announcement_that_never_comes_ends_at_the_receipt_deadline():
    p = Pair(rtt=0.01)
    x, _ = _datagram_ahead_of_its_announcement(p)  # the announcement is never delivered
    p.server.close_receiver(0, p.now)
    closed_at, sent = None, []
    while (t := p.server.get_timer()) is not None and t <= p.now + 1.0 and closed_at is None:
        p.server.handle_timer(t)  # only the server's timers: the client stays silent
        sent += p.server.transmit()
        if 0 not in p.server.channels:
            closed_at = t
    assert closed_at is not None, "the held close never ended"
    assert closed_at >= p.now + 0.1  # it waited the receipt deadline (max(2 RTT, 100 ms))
    assert any(isinstance(a, StreamDataQueued) and a.data.endswith(b"\x0a") for a in sent)  # CLOSE_RECEIVER


def test_message_closed_before_dequeue_loses_its_attachment():
    p = Pair(auto_dequeue=False)
    p.handshake()
    x = p.client.new_channel(Side.CLIENT)
    p.client.send(0, [b"carrier"], attachments=[x], now=p.now)
    p.flush()
    p.client.send(x, [b"on x"], now=p.now)
    p.flush()
    p.server.close_receiver(0, p.now)  # before the ack timer: the carrier is nacked
    p.settle()
    assert p.of("client", ReceiverWasClosed) == [ReceiverWasClosed(0)]
    assert p.of("client", ChannelLost) == [ChannelLost(x)]
    assert_empty(p)


def test_acked_message_closed_before_dequeue_ends_its_attachment():
    p = Pair(auto_dequeue=False)
    p.handshake()
    x = p.client.new_channel(Side.CLIENT)
    p.client.send(0, [b"carrier"], attachments=[x], now=p.now)
    p.settle()  # acked: x is accessible for the client
    p.server.close_receiver(0, p.now)
    p.settle()
    # the server's application never saw x: the server closes it like a dropped handle
    assert p.of("client", ReceiverWasClosed) == [ReceiverWasClosed(0), ReceiverWasClosed(x)]
    assert not p.of("client", ChannelLost)
    assert_empty(p)


def test_message_on_a_channel_then_cancelled():
    p = Pair(auto_dequeue=False)
    p.handshake()
    x = p.client.new_channel(Side.SERVER)
    p.client.send(0, [b"carrier"], attachments=[x], now=p.now)
    p.client.cancel(0, p.now)
    p.settle()
    assert p.of("server", ChannelCancelled) == [ChannelCancelled(0)]
    assert p.of("client", ChannelLost) == [ChannelLost(x)]
    assert not p.of("server", ChannelLost)  # the server application never had x
    assert_empty(p)


def test_three_level_cascade_through_an_acked_message():
    # entrypoint (unreliable) -> a: dropped.  a -> b: acked while a is pending.  b -> c.
    p = Pair(datagrams=lambda side, i, d: "drop" if side == "client" and i == 0 else "deliver")
    p.handshake()
    p.client.set_mode(0, Mode.UNRELIABLE)
    a = p.client.new_channel(Side.CLIENT)
    b = p.client.new_channel(Side.CLIENT)
    c = p.client.new_channel(Side.SERVER)
    p.client.send(0, [b"carries a"], attachments=[a], now=p.now)
    p.client.send(a, [b"carries b"], attachments=[b], now=p.now)
    p.client.send(b, [b"carries c"], attachments=[c], now=p.now)
    p.flush()
    p.advance(0.15)  # the server acks a's and b's messages; the entrypoint datagram is missing
    assert not p.of("client", ChannelLost)
    p.advance(1.0)  # receipt deadline (1 s, no RTT sample) passes: nack -> a, b, c lost
    assert {e.chanid for e in p.of("client", ChannelLost)} == {a, b, c}
    # the server had state for a, b, c (early ROUTE_TO and attachments): FORGET_CHANNEL freed
    # it, and its application never saw anything of them (a's handle never arrived)
    assert not [e for e in p.of("server", Delivered) if e.chanid in (a, b, c)]
    assert ChannelLost(a) not in p.of("server", ChannelLost)
    # each side counts every channel it lost, with or without an event for it
    assert p.client.stats().channels_lost == 3 and p.server.stats().channels_lost == 3
    finish_entrypoint(p)
    assert_empty(p)


def test_children_become_accessible_when_the_parent_does():
    p = Pair(rtt=0.01)
    p.handshake()
    a = p.client.new_channel(Side.CLIENT)
    b = p.client.new_channel(Side.CLIENT)
    p.client.send(0, [b"carries a"], attachments=[a], now=p.now)
    p.client.send(a, [b"carries b"], attachments=[b], now=p.now)
    p.settle()
    assert p.client.tracking_count() == 0  # everything settled as accessible
    for chanid in (b, a):
        p.client.finish(chanid, p.now)
    finish_entrypoint(p)
    assert not p.of("client", ChannelLost)
    assert_empty(p)


def test_route_to_for_a_lost_local_channel_gets_forget_back():
    p = Pair(datagrams=lambda side, i, d: "drop" if side == "client" and i == 0 else "deliver",
             rtt=0.01)
    p.handshake()
    p.client.set_mode(0, Mode.UNRELIABLE)
    tx = p.client.new_channel(Side.SERVER)  # the server would send on it
    p.client.send(0, [b"carries tx"], attachments=[tx], now=p.now)
    p.advance(0.5)
    assert p.of("client", ChannelLost) == [ChannelLost(tx)]
    # the client never routed to tx, so nothing was forgotten on the server: it never heard of tx
    assert tx not in p.server.channels
    finish_entrypoint(p)
    assert_empty(p)


def test_forgotten_remote_channel_is_never_recreated():
    # datagram 0 (carrier of x) is dropped, datagram 1 (a message on x) arrives very late
    fates = {0: "drop", 1: "hold"}
    p = Pair(datagrams=lambda side, i, d: fates.get(i, "deliver") if side == "client" else "deliver",
             rtt=0.01)
    p.handshake()
    p.client.set_mode(0, Mode.UNRELIABLE)
    x = p.client.new_channel(Side.CLIENT)
    p.client.send(0, [b"carrier"], attachments=[x], now=p.now)
    p.client.set_mode(x, Mode.UNRELIABLE)
    p.client.send(x, [b"late"], now=p.now)
    p.client.send(x, [b"on time"], now=p.now)  # routes x: the server creates it early
    p.advance(0.5)
    assert p.of("client", ChannelLost) == [ChannelLost(x)]
    assert x not in p.server.channels
    p.release_held()
    assert x not in p.server.channels
    # x's handle never reached the server application, so neither did anything sent on x
    assert received(p, "server", x) == [] and p.of("server", ChannelLost) == []
    assert p.client.stats().channels_lost == 1 and p.server.stats().channels_lost == 1
    finish_entrypoint(p)
    assert_empty(p)


def test_channel_finished_before_its_handle_arrives_is_delivered_after_it():
    # the attached channel's stream (messages + FINISH) overtakes the carrying message
    p = Pair()
    p.handshake()
    p.client.send(0, [b"first"], now=p.now)
    p.flush()
    x = p.client.new_channel(Side.CLIENT)
    p.client.send(0, [b"carrier"], attachments=[x], now=p.now)
    carrier = p.client.transmit()
    for i in range(3):
        p.client.send(x, [b"%d" % i], now=p.now)
    p.client.finish(x, p.now)
    p.flush()  # x's streams arrive; the carrier is still in flight
    assert not received(p, "server", x) and ChannelFinished(x) not in p.events["server"]
    p._deliver("client", "server", carrier)
    p.settle()
    events = [e for e in p.events["server"] if getattr(e, "chanid", None) in (0, x)]
    kinds = [(type(e).__name__, e.chanid) for e in events]
    assert kinds[:6] == [
        ("Delivered", 0),
        ("Delivered", 0),
        ("Delivered", x),
        ("Delivered", x),
        ("Delivered", x),
        ("ChannelFinished", x),
    ]
    finish_entrypoint(p)
    assert_empty(p)
