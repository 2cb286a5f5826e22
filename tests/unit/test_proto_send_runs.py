"""Send runs: ``Connection.send`` of a run must put on the wire exactly what runs of one do.

A single message is the run of one, so these tests hold the one path to
itself: a run against the same messages sent one at a time (the runtime's
``send()``, which adds while the queue is not full), byte for byte and count
for count, in every mode and with or without headers (the plain ORDERED run
takes the fast step, the rest the general one).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aqueduct.proto.config import ProtoConfig
from aqueduct.proto.errors import LocalProtocolError
from aqueduct.proto.events import DatagramQueued, StreamDataQueued
from aqueduct.proto.pair import Delivered, Pair
from aqueduct.wire.chanid import ENTRYPOINT, Side
from aqueduct.wire.modes import Mode


def _pair(window: int, mode: Mode = Mode.ORDERED) -> Pair:
    p = Pair(client=ProtoConfig(max_queued=32), server=ProtoConfig(window=window))
    p.handshake()
    p.client.set_mode(ENTRYPOINT, mode)
    return p


def _wire(p: Pair) -> list[tuple[int, bytes, bool] | bytes]:
    """What the client puts on its streams and in datagrams now (then delivered, as the pair would)."""
    actions = p.client.transmit()
    p._deliver("client", "server", actions)
    return [
        (a.stream_id, a.data, a.end_stream) if isinstance(a, StreamDataQueued) else a.data
        for a in actions
        if isinstance(a, (StreamDataQueued, DatagramQueued))
    ]


@settings(max_examples=150, deadline=None)
@given(
    before=st.lists(st.binary(max_size=300), max_size=5),
    run=st.lists(st.binary(max_size=5000), min_size=1, max_size=80),
    window=st.integers(min_value=64, max_value=40_000),
    mode=st.sampled_from([Mode.ORDERED, Mode.ORDERED, Mode.UNORDERED, Mode.UNRELIABLE]),
    headers=st.sampled_from([(), (("k", b"v"),)]),
)
def test_a_run_does_byte_for_byte_what_runs_of_one_would(before, run, window, mode, headers) -> None:
    """Sent while the window admits, queued until the queue is full, then stopped: like send() each."""
    bulk, single = _pair(window, mode), _pair(window, mode)
    for p in (bulk, single):
        for payload in before:
            p.client.send(ENTRYPOINT, [payload], now=p.now)
    taken, settled = bulk.client.send(ENTRYPOINT, run, headers, now=bulk.now)
    count = 0
    for payload in run:  # the runtime's send(): adds only while the queue is not full
        if count and single.client.send_blocked(ENTRYPOINT):
            break
        last = single.client.send(ENTRYPOINT, [payload], headers, now=single.now)
        count += 1
    assert taken == count
    assert settled == last[1]
    assert bulk.client.send_blocked(ENTRYPOINT) == single.client.send_blocked(ENTRYPOINT)
    assert _wire(bulk) == _wire(single)
    assert bulk.client.stats() == single.client.stats()
    assert bulk.client.channel_stats(ENTRYPOINT) == single.client.channel_stats(ENTRYPOINT)
    for p in (bulk, single):
        p.settle()  # the server dequeues: the window opens, the queue drains
    if mode is not Mode.UNRELIABLE:
        assert [e.payload for e in bulk.of("server", Delivered)] == [*before, *run[:taken]]
    assert bulk.client.stats() == single.client.stats()


def test_a_run_arrives_as_the_messages_in_order() -> None:
    p = Pair()
    p.handshake()
    run = [b"%d" % n for n in range(1000)]
    assert p.client.send(ENTRYPOINT, run) == (1000, True)
    p.settle()
    assert [e.payload for e in p.of("server", Delivered)] == run


def test_the_first_message_is_always_taken_the_rest_while_the_queue_has_room() -> None:
    """A full queue refuses the rest of a run, never its first message (a lone send() is never refused)."""
    p = Pair(client=ProtoConfig(max_queued=2), server=ProtoConfig(window=64))
    p.handshake()
    assert p.client.send(ENTRYPOINT, [b"x" * 100, b"a", b"b", b"c"]) == (3, False)
    assert p.client.send_blocked(ENTRYPOINT)
    assert p.client.send(ENTRYPOINT, [b"d", b"e"]) == (1, False)  # the runtime waits before this
    assert p.client.channel_stats(ENTRYPOINT).window_stalls == 3


def test_attachments_go_on_a_run_of_one_only() -> None:
    """A channel travels in one message: a run carrying one is refused before anything is attached."""
    p = Pair()
    p.handshake()
    tx = p.client.new_channel(Side.CLIENT)
    for payloads in ([b"a", b"b"], []):
        with pytest.raises(
            LocalProtocolError,
            match=f"^channel 0: attachments go on a run of one message, not {len(payloads)}$",
        ):
            p.client.send(ENTRYPOINT, payloads, attachments=[tx])
    assert p.client.channel_stats(ENTRYPOINT).messages_sent == 0
    assert p.client.send(ENTRYPOINT, [b"carries tx"], attachments=[tx]) == (1, True)  # tx was not taken
    p.settle()
    assert [e.attachments[0].chanid for e in p.of("server", Delivered)] == [tx]


def test_a_oneshot_run_is_refused_whole() -> None:
    p = Pair()
    p.handshake()
    o = p.client.new_channel(Side.CLIENT, oneshot=True)
    p.client.send(ENTRYPOINT, [b"carries o"], attachments=[o])
    with pytest.raises(LocalProtocolError, match=f"^channel {o}: a oneshot channel carries one message$"):
        p.client.send(o, [b"a", b"b"])
    assert p.client.send(o, [b"one"]) == (1, True)


def test_a_run_on_a_finished_sender_raises_like_one_message() -> None:
    p = _pair(window=100)
    p.client.finish(ENTRYPOINT, p.now)
    with pytest.raises(LocalProtocolError, match="^channel 0: send after finished$"):
        p.client.send(ENTRYPOINT, [b"a", b"b"])
