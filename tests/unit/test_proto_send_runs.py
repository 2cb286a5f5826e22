"""Plain ORDERED send runs: the sender's bulk path must put on the wire exactly what ``send_message`` does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aqueduct.proto.config import ProtoConfig
from aqueduct.proto.events import MessageReceived, StreamDataQueued
from aqueduct.proto.pair import Pair
from aqueduct.wire.chanid import ENTRYPOINT
from aqueduct.wire.modes import Mode


def _pair(window: int) -> Pair:
    p = Pair(client=ProtoConfig(max_queued=32), server=ProtoConfig(window=window))
    p.handshake()
    return p


def _wire(p: Pair) -> list[tuple[int, bytes, bool]]:
    """What the client puts on its streams now (then delivered, as the pair would)."""
    actions = p.client.transmit()
    p._deliver("client", "server", actions)
    return [(a.stream_id, a.data, a.end_stream) for a in actions if isinstance(a, StreamDataQueued)]


@settings(max_examples=150, deadline=None)
@given(
    before=st.lists(st.binary(max_size=300), max_size=5),
    run=st.lists(st.binary(max_size=5000), min_size=1, max_size=80),
    window=st.integers(min_value=64, max_value=40_000),
)
def test_a_run_does_byte_for_byte_what_one_send_each_would(before, run, window) -> None:
    """Sent while the window admits, queued until the queue is full, then stopped: like send() each."""
    bulk, single = _pair(window), _pair(window)
    for p in (bulk, single):
        for payload in before:
            p.client.send_message(ENTRYPOINT, payload, now=p.now)
    taken = bulk.client.send_plain_run(ENTRYPOINT, run)
    count = 0
    for payload in run:  # the runtime's send(): adds only while the queue is not full
        if single.client.send_blocked(ENTRYPOINT):
            break
        single.client.send_message(ENTRYPOINT, payload, now=single.now)
        count += 1
    assert taken == count
    assert bulk.client.send_blocked(ENTRYPOINT) == single.client.send_blocked(ENTRYPOINT)
    assert _wire(bulk) == _wire(single)
    assert bulk.client.stats() == single.client.stats()
    for p in (bulk, single):
        p.settle()  # the server dequeues: the window opens, the queue drains
    assert [e.payload for e in bulk.of("server", MessageReceived)] == [*before, *run[:taken]]
    assert bulk.client.stats() == single.client.stats()


def test_a_run_arrives_as_the_messages_in_order() -> None:
    p = Pair()
    p.handshake()
    run = [b"%d" % n for n in range(1000)]
    assert p.client.send_plain_run(ENTRYPOINT, run) == 1000
    p.settle()
    assert [e.payload for e in p.of("server", MessageReceived)] == run


def test_a_run_steps_aside_where_it_does_not_apply() -> None:
    """Not ORDERED, or a finished sender: 0, and the caller sends one by one (which raises)."""
    p = _pair(window=100)
    p.client.set_mode(ENTRYPOINT, Mode.UNORDERED)
    assert p.client.send_plain_run(ENTRYPOINT, [b"a", b"b"]) == 0
    p.client.set_mode(ENTRYPOINT, Mode.ORDERED)
    p.client.finish(ENTRYPOINT, p.now)
    assert p.client.send_plain_run(ENTRYPOINT, [b"a", b"b"]) == 0
