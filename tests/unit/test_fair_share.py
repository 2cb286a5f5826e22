"""The fair share: over ``max_lag``, the producers that filled the backlog wait, a light one goes on.

The numbers are the failover deadlock's (docs/bridge.md, flow control):
``max_lag`` 200, two producers each with 128 records of one stream
waiting (lag 256), and a producer that just moved here with two streams
to resend.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aqueduct.bridge.ingest.backlog import Backlog
from aqueduct.bridge.ingest.fair_share import CEILING_FACTOR, OwnBacklog, fair_share, may_grant

HEAVY = OwnBacklog(records=128, streams=1, lagging=1)


def test_under_the_bound_every_session_gets_its_credits() -> None:
    assert may_grant(200, 200, OwnBacklog(records=200, streams=1, lagging=1), lagging_streams=1)


def test_over_the_bound_the_producers_that_filled_it_wait() -> None:
    # two lagging streams of one stream each: a share of 100, and each has 128 waiting
    assert fair_share(200, HEAVY, lagging_streams=2) == 100
    assert not may_grant(256, 200, HEAVY, lagging_streams=2)


def test_a_producer_that_just_moved_here_always_gets_its_credits() -> None:
    moved = OwnBacklog(records=0, streams=2, lagging=0)
    assert may_grant(256, 200, moved, lagging_streams=2)
    assert may_grant(10 * 200, 200, moved, lagging_streams=2)  # even past the ceiling: nothing of its own waits


def test_a_light_producer_sends_up_to_its_share_of_streams() -> None:
    # its 2 streams (one lagging) among 3 lagging: 200 * 2 // (3 + 1) = 100
    light = OwnBacklog(records=99, streams=2, lagging=1)
    assert fair_share(200, light, lagging_streams=3) == 100
    assert may_grant(256 + 99, 200, light, lagging_streams=3)
    assert not may_grant(256 + 100, 200, OwnBacklog(records=100, streams=2, lagging=1), lagging_streams=3)


def test_at_the_ceiling_only_sessions_with_nothing_waiting_get_credits() -> None:
    light = OwnBacklog(records=1, streams=1, lagging=1)
    assert CEILING_FACTOR == 2
    assert fair_share(200, light, lagging_streams=1) == 200
    assert may_grant(399, 200, light, lagging_streams=1)
    assert not may_grant(400, 200, light, lagging_streams=1)


def test_the_share_never_falls_to_nothing() -> None:
    assert fair_share(200, OwnBacklog(records=5, streams=1, lagging=1), lagging_streams=10_000) == 1


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 40), st.integers(0, 40)), max_size=60))
def test_the_backlog_keeps_its_lag_and_lagging_streams_current(moves: list[tuple[int, int, int]]) -> None:
    backlog = Backlog()
    for sid, complete, committed in moves:
        backlog.move(sid, complete=complete, committed=committed)
    lags = [backlog.lag_of(sid) for sid in backlog.complete_offsets()]
    assert backlog.lag == sum(lags)
    assert backlog.lagging == sum(1 for n in lags if n)


@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=8),  # each session's number of streams
    st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3)), max_size=300),  # (session, its stream) sending
)
def test_with_nothing_committed_the_backlog_stays_below_twice_max_lag_plus_the_credits(
    streams_of: list[int], sends: list[tuple[int, int]]
) -> None:
    """Sessions send ``credits`` records at a time whenever the rule lets them, and nothing commits."""
    max_lag, credits = 200, 16
    backlog = Backlog()
    sids = [[100 * s + j for j in range(n)] for s, n in enumerate(streams_of)]
    for session, stream in sends:
        mine = sids[session % len(sids)]
        own = [backlog.lag_of(sid) for sid in mine]
        if may_grant(backlog.lag, max_lag, OwnBacklog(sum(own), len(own), sum(1 for n in own if n)), backlog.lagging):
            sid = mine[stream % len(mine)]
            backlog.move(sid, complete=backlog.complete_offsets().get(sid, 0) + credits)
        assert backlog.lag < CEILING_FACTOR * max_lag + len(sids) * credits
