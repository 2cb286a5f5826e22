"""Hypothesis state machine: random sends, modes, attachments, datagram loss/reorder and time.

Every datagram is held on the fake wire; rules deliver or drop held ones in
any order while time moves on. At the end the client finishes everything
and the checks are what a user relies on: every reliable message exactly
once (ORDERED ones in order), every unreliable number acked or nacked
exactly once and a nacked one never delivered, exactly the channels
attached to undelivered messages reported lost, no protocol violation, and
both connections' channel tables empty.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from aqueduct.proto.events import ChannelFinished, ChannelLost, MessagesAcked
from aqueduct.proto.pair import Delivered, Pair
from aqueduct.wire import Side
from aqueduct.wire.modes import Mode


class SenderReceiverMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.p = Pair(datagrams=lambda side, i, d: "hold", rtt=0.01)
        self.p.handshake()
        self.sent: dict[bytes, tuple[Mode, int | None]] = {}  # payload -> (mode, attachment)
        self.counter = 0

    @rule(mode=st.sampled_from(list(Mode)), attach=st.booleans(), reverse=st.booleans())
    def send(self, mode: Mode, attach: bool, reverse: bool) -> None:
        p = self.p
        p.reverse_streams = reverse
        p.client.set_mode(0, mode)
        payload = b"%d" % self.counter
        self.counter += 1
        att = p.client.new_channel(Side.CLIENT) if attach else None
        p.client.send(0, [payload], attachments=[att] if att is not None else [], now=p.now)
        self.sent[payload] = (mode, att)
        p.flush()

    @precondition(lambda self: self.p.held)
    @rule(data=st.data(), drop=st.booleans())
    def datagram(self, data, drop: bool) -> None:
        i = data.draw(st.integers(0, len(self.p.held) - 1))
        if drop:
            self.p.drop_held(i)
        else:
            self.p.deliver_held(i)

    @rule(dt=st.sampled_from([0.01, 0.05, 0.15, 0.5]))
    def wait(self, dt: float) -> None:
        self.p.advance(dt)

    def teardown(self) -> None:
        p = self.p
        while p.held:
            p.deliver_held(0)
        for _, att in self.sent.values():
            if att is not None and att in p.client.channels:
                p.client.finish(att, p.now)
        p.client.finish(0, p.now)
        p.settle(5.0)

        assert not p.closes
        got = [e.payload for e in p.of("server", Delivered) if e.chanid == 0]
        assert len(got) == len(set(got))
        reliable = [m for m, (mode, _) in self.sent.items() if mode is not Mode.UNRELIABLE]
        unreliable = [m for m, (mode, _) in self.sent.items() if mode is Mode.UNRELIABLE]
        assert set(reliable) <= set(got)
        ordered = [m for m in got if self.sent[m][0] is Mode.ORDERED]
        assert ordered == [m for m in reliable if self.sent[m][0] is Mode.ORDERED]
        delivered_u = [m for m in got if self.sent[m][0] is Mode.UNRELIABLE]
        acks = p.of("client", MessagesAcked)
        assert sum(a.acked for a in acks if a.chanid == 0) == len(reliable) + len(delivered_u)
        assert sum(a.nacked for a in acks if a.chanid == 0) == len(unreliable) - len(delivered_u)
        undelivered_atts = {
            att for m, (_, att) in self.sent.items() if att is not None and m not in got
        }
        assert {e.chanid for e in p.of("client", ChannelLost)} == undelivered_atts
        delivered_atts = {att for m, (_, att) in self.sent.items() if att is not None and m in got}
        # (a lost channel the client finished may also finish on the server, unseen by its app)
        assert {e.chanid for e in p.of("server", ChannelFinished)} >= delivered_atts | {0}
        for conn in (p.client, p.server):
            assert conn.channel_count() == 0
            assert conn.tracking_count() == 0


TestSenderReceiver = SenderReceiverMachine.TestCase
TestSenderReceiver.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


class ChannelTreeMachine(RuleBasedStateMachine):
    """Channels in both directions, attached in any mode, ended every way, under datagram loss.

    Whatever happens, once both applications end what they hold, nothing may
    leak: no violation, and both connections' channel tables end up empty.
    """

    def __init__(self) -> None:
        super().__init__()
        self.p = Pair(datagrams=lambda side, i, d: "hold", rtt=0.01)
        self.p.handshake()
        self.children: list[int] = []

    def _server_handles(self) -> set[int]:
        return {a.chanid for e in self.p.of("server", Delivered) for a in e.attachments}

    def _open_sender(self, side: str, chanid: int) -> bool:
        ch = self.p.conn(side).channels.get(chanid)
        return ch is not None and ch.is_sender and ch.state.value == "open"

    @rule(mode=st.sampled_from(list(Mode)), server_sends=st.booleans())
    def attach(self, mode: Mode, server_sends: bool) -> None:
        p = self.p
        p.client.set_mode(0, mode)
        child = p.client.new_channel(Side.SERVER if server_sends else Side.CLIENT)
        p.client.send(0, [b"carrier"], attachments=[child], now=p.now)
        self.children.append(child)
        p.flush()

    @precondition(lambda self: self.children)
    @rule(data=st.data(), action=st.sampled_from(["send", "finish", "cancel", "close"]))
    def act(self, data, action: str) -> None:
        p = self.p
        child = data.draw(st.sampled_from(self.children))
        client_sends = ((child >> 1) & 1) == 0
        if action == "send":
            if client_sends and self._open_sender("client", child):
                p.client.send(child, [b"c"], now=p.now)
            elif not client_sends and child in self._server_handles() and self._open_sender("server", child):
                p.server.send(child, [b"s"], now=p.now)
        elif action in ("finish", "cancel"):
            side = "client" if client_sends else "server"
            if self._open_sender(side, child) and (client_sends or child in self._server_handles()):
                getattr(p.conn(side), action)(child, p.now)
        elif not client_sends and child in p.client.channels:
            p.client.close_receiver(child, p.now)
        elif client_sends and child in self._server_handles() and child in p.server.channels:
            p.server.close_receiver(child, p.now)
        p.flush()

    @precondition(lambda self: self.p.held)
    @rule(data=st.data(), drop=st.booleans())
    def datagram(self, data, drop: bool) -> None:
        i = data.draw(st.integers(0, len(self.p.held) - 1))
        if drop:
            self.p.drop_held(i)
        else:
            self.p.deliver_held(i)

    @rule(dt=st.sampled_from([0.05, 0.15, 0.5]))
    def wait(self, dt: float) -> None:
        self.p.advance(dt)

    def teardown(self) -> None:
        p = self.p
        while p.held:
            p.drop_held(0)
        p.client.finish(0, p.now)
        p.settle(3.0)
        for child in self.children:
            if self._open_sender("client", child):
                p.client.finish(child, p.now)
            if child in self._server_handles() and self._open_sender("server", child):
                p.server.finish(child, p.now)
        p.settle(3.0)
        assert not p.closes
        for conn in (p.client, p.server):
            assert conn.channel_count() == 0, dict(conn.channels)
            assert conn.tracking_count() == 0


TestChannelTree = ChannelTreeMachine.TestCase
TestChannelTree.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
