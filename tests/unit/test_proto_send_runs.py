"""Plain ORDERED send runs: the sender's bulk path must put on the wire exactly what ``send_message`` does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aqueduct.proto.config import ProtoConfig
from aqueduct.proto.events import MessageReceived, StreamDataQueued
from aqueduct.proto.pair import Pair
from aqueduct.proto.sender import Mode
from aqueduct.wire.chanid import ENTRYPOINT


def _pair(window: int) -> Pair:
    p = Pair(server=ProtoConfig(window=window), auto_dequeue=False)
    p.handshake()
    return p


def _wire(p: Pair) -> list[tuple[int, bytes, bool]]:
    return [(a.stream_id, a.data, a.end_stream) for a in p.client.transmit() if isinstance(a, StreamDataQueued)]


@settings(max_examples=150, deadline=None)
@given(
    before=st.lists(st.binary(max_size=300), max_size=5),
    run=st.lists(st.binary(max_size=5000), min_size=1, max_size=60),
    window=st.integers(min_value=64, max_value=40_000),
)
def test_a_run_sends_byte_for_byte_what_one_send_each_would(before, run, window) -> None:
    """Whatever went before, however far the window reaches: same bytes, same counts, same stats."""
    bulk, single = _pair(window), _pair(window)
    for p in (bulk, single):
        for payload in before:
            p.client.send_message(ENTRYPOINT, payload, now=p.now)
    taken = bulk.client.send_plain_run(ENTRYPOINT, run)
    for payload in run[:taken]:
        assert single.client.send_message(ENTRYPOINT, payload, now=single.now)
    assert _wire(bulk) == _wire(single)
    assert bulk.client.stats() == single.client.stats()
    if taken < len(run):  # the window stopped it: one more would have waited in the queue too
        assert not single.client.send_message(ENTRYPOINT, run[taken], now=single.now)
    else:
        assert not bulk.client.send_blocked(ENTRYPOINT)


def test_a_run_arrives_as_the_messages_in_order() -> None:
    p = Pair()
    p.handshake()
    run = [b"%d" % n for n in range(1000)]
    assert p.client.send_plain_run(ENTRYPOINT, run) == 1000
    p.settle()
    assert [e.payload for e in p.of("server", MessageReceived)] == run


def test_a_run_steps_aside_where_it_does_not_apply() -> None:
    """Not ORDERED, or something queued: 0, and the caller sends one by one."""
    p = _pair(window=100)
    p.client.set_mode(ENTRYPOINT, Mode.UNORDERED)
    assert p.client.send_plain_run(ENTRYPOINT, [b"a", b"b"]) == 0
    p.client.set_mode(ENTRYPOINT, Mode.ORDERED)
    assert p.client.send_message(ENTRYPOINT, b"x" * 200, now=p.now)  # an oversized first one goes
    assert not p.client.send_message(ENTRYPOINT, b"y", now=p.now)  # this one waits in the queue
    assert p.client.send_plain_run(ENTRYPOINT, [b"z"]) == 0  # never ahead of the queue
