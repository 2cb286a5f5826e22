"""The small machines the connection is built from: flow arithmetic, transit tracking, timers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aqueduct.proto.config import ProtoConfig, peer_window
from aqueduct.proto.flow import DequeueReporter, SendWindow, message_cost, message_head
from aqueduct.proto.timers import Timers
from aqueduct.proto.transit import Status, TransitTracker, message_key
from aqueduct.wire import AttachmentRef, MessageFrame, encode_frame

keys = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=5)
headers = st.lists(st.tuples(keys, st.binary(max_size=200)), max_size=3).map(tuple)
messages = st.builds(
    MessageFrame,
    num=st.integers(0, 2**64 - 1),
    headers=headers,
    attachments=st.lists(
        st.builds(AttachmentRef, chanid=st.integers(0, 2**40), headers=headers), max_size=3
    ).map(tuple),
    payload=st.binary(max_size=300),
)


@given(messages)
def test_message_head_and_cost_match_the_wire_encoder(msg):
    encoded = encode_frame(msg)
    assert message_head(msg.num, msg.headers, msg.attachments, len(msg.payload)) + msg.payload == encoded
    assert message_cost(msg) == len(encoded)


def test_window_admits_while_room_or_nothing_outstanding():
    w = SendWindow(100)
    assert w.admits(500)  # nothing outstanding: an oversized message never deadlocks
    w.sent(60)
    assert w.admits(40) and not w.admits(41)
    assert w.released(60)
    assert not w.released(1)  # more than outstanding is reported to the caller


def test_dequeue_reporter_threshold_and_timer():
    r = DequeueReporter(window=400, delay=0.05)
    assert not r.add(50, now=1.0)
    assert r.due == 1.05
    assert r.add(50, now=1.01)  # 100 = W0/4
    assert r.take() == 100 and r.due is None


def test_window_header_round_trip():
    cfg = ProtoConfig(window=4096)
    assert peer_window(cfg.headers_to_send()) == 4096
    assert peer_window(ProtoConfig().headers_to_send()) is None


def test_transit_cascade_through_pending_parents():
    t = TransitTracker()
    for c in (1, 2, 3):
        t.created(c)
    t.attached(0, message_key(0, True), (1,))  # entrypoint datagram carries 1
    t.attached(1, message_key(0, False), (2,))  # 1 carries 2 ...
    t.acked(1, message_key(0, False))  # ... acked while 1 is pending
    t.attached(2, message_key(5, False), (3,))  # 2 carries 3, not acked
    assert t.status(2) is Status.PENDING
    assert sorted(t.nacked(0, message_key(0, True))) == [1, 2, 3]
    assert len(t) == 0


def test_transit_accessible_propagates_to_acked_children():
    t = TransitTracker()
    t.created(1)
    t.created(2)
    t.attached(0, message_key(0, False), (1,))
    t.attached(1, message_key(0, False), (2,))
    t.acked(1, message_key(0, False))
    assert t.status(2) is Status.PENDING
    t.acked(0, message_key(0, False))
    assert t.status(1) is Status.ACCESSIBLE and t.status(2) is Status.ACCESSIBLE
    assert len(t) == 0


def test_timers_keep_the_earliest_deadline_per_key():
    tm = Timers()
    tm.schedule(7, 5.0)
    tm.schedule(7, 3.0)
    tm.schedule(7, 9.0)  # later than the live one: ignored
    tm.schedule(8, 4.0)
    assert tm.next() == 3.0
    assert tm.pop_due(4.0) == [7, 8]
    assert tm.next() is None  # the stale 5.0 entry of key 7 is skipped
