"""What a draining bridge waits for (:func:`waiting`), its phases, and its refusal: the rules apart from any process.

The bridge may exit only when :attr:`Waiting.nothing` holds: every complete
epoch committed by the consumers that drive acks, and every record received
durable. Records of an open epoch are never waited for (no query can read
them; their producer resends them), so only complete offsets come in here.
"""

from __future__ import annotations

from aqueduct.bridge.app.drain import (
    DRAIN_WINDOW,
    REFUSAL,
    Drain,
    DrainPhase,
    DrainRequested,
    NothingLeft,
    waiting,
)
from aqueduct.connector.events import SessionEnded
from aqueduct.connector.frames import (
    DEFAULT_MAX_FRAME_SIZE,
    PROTOCOL_VERSION,
    Error,
    FrameSplitter,
    Hello,
    encode,
)
from aqueduct.connector.wallaroo import frames as wallaroo_frames
from aqueduct.connector.wallaroo.frames import PROTOCOL_VERSION as WALLAROO_VERSION
from aqueduct.connector.wallaroo.frames import WallarooError, WallarooFrameSplitter, WallarooHello
from aqueduct.connector.wallaroo.worker_session import WallarooSession
from aqueduct.connector.worker_session import HelloRefused, WorkerConfig, WorkerSession
from aqueduct.proto.errors import ConnectionLost
from aqueduct.runtime.retry_hint import CONNECTION_REFUSED, RetryWindow, retry_window


def test_nothing_is_left_once_the_ack_frontier_reached_every_complete_epoch_and_all_is_durable() -> None:
    left = waiting({1: 10, 2: 5}, {1: 10, 2: 5}, {"default": {1: 10, 2: 5}}, settled=True)
    assert left.nothing and left.line() == "nothing left uncommitted"
    unsettled = waiting({1: 10}, {1: 10}, {"default": {1: 10}}, settled=False)
    assert not unsettled.nothing
    assert unsettled.line() == "waiting for the last records received to be durable"


def test_what_is_left_names_the_streams_most_first_and_the_consumers_behind() -> None:
    left = waiting(
        {1: 10, 2: 50, 3: 7}, {1: 4, 2: 20, 3: 7},
        {"default": {1: 4, 2: 50, 3: 7}, "audit": {1: 10, 2: 20, 3: 7}, "done": {1: 10, 2: 50, 3: 7}},
        settled=True,
    )  # fmt: skip
    assert (left.records, left.streams, left.consumers) == (36, ((2, 30), (1, 6)), ("audit", "default"))
    assert left.line() == "waiting for 36 records of 2 streams (2: 30, 1: 6) to be committed by audit, default"


def test_a_long_list_of_streams_is_cut_and_no_ack_consumer_is_said() -> None:
    left = waiting({sid: 1000 + sid for sid in range(8)}, {}, {}, settled=True)
    assert left.line() == (
        "waiting for 8,028 records of 8 streams (7: 1,007, 6: 1,006, 5: 1,005, 4: 1,004, 3: 1,003, and 3 more) "
        "to be committed by a consumer that drives acks (none is live)"
    )


def test_a_drain_begins_at_the_first_request_and_ends_only_when_nothing_is_left() -> None:
    drain = Drain()
    assert drain.apply(NothingLeft()) is DrainPhase.SERVING  # an idle bridge is not drained unasked
    assert drain.apply(DrainRequested("a")) is DrainPhase.DRAINING and drain.draining
    since = drain.since
    assert drain.apply(DrainRequested("b")) is DrainPhase.DRAINING  # a second request is answered, nothing restarts
    assert (drain.request, drain.since) == ("b", since)
    assert drain.apply(NothingLeft()) is DrainPhase.DRAINED and not drain.draining
    assert drain.apply(DrainRequested("c")) is DrainPhase.DRAINED


def test_the_refusal_names_its_window_as_every_busy_refusal_does() -> None:
    assert REFUSAL == "busy: retry within 10.00 s, not before 2.00 s; this bridge is draining"
    assert retry_window(ConnectionLost(REFUSAL, CONNECTION_REFUSED)) == DRAIN_WINDOW == RetryWindow(2.0, 10.0)


def refuse(program_name: str, instance_name: str) -> list:
    raise HelloRefused(REFUSAL)


def test_a_refused_hello_is_answered_with_error_instead_of_ok_on_both_worker_wires() -> None:
    """The connector resumes nothing on a draining bridge: no OK (its durable points, its credits) comes first."""
    session = WorkerSession(WorkerConfig(), refuse)
    events = session.receive_data(encode(Hello(PROTOCOL_VERSION, b"", "p", "i")))
    splitter = FrameSplitter(DEFAULT_MAX_FRAME_SIZE)
    splitter.push(session.data_to_send())
    assert splitter.drain() == ([Error(REFUSAL)], None)
    assert events == [SessionEnded(REFUSAL, "local")] and session.ended

    wallaroo = WallarooSession(WorkerConfig(), refuse)
    events = wallaroo.receive_data(wallaroo_frames.encode(WallarooHello(WALLAROO_VERSION, b"", "p", "i")))
    answer = WallarooFrameSplitter()
    answer.push(wallaroo.data_to_send())
    assert answer.drain() == ([WallarooError(REFUSAL)], None)
    assert events == [SessionEnded(REFUSAL, "local")] and wallaroo.ended
