"""A busy server's retry hint: the window its refusals ask clients to spread their retries over."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aqueduct.proto.errors import ConnectionLost
from aqueduct.runtime.retry_hint import MAX_WINDOW, MIN_WINDOW, RetryHint, busy_reason, retry_within


def _second(hint: RetryHint, now: float, refusals: int, completions: int) -> None:
    """One second of traffic: refused attempts and completed handshakes."""
    hint.tick(now)
    for i in range(refusals):
        hint.refused(now + i / (refusals + 1))
    for _ in range(completions):
        hint.completed()


def test_a_crowd_many_times_the_handshake_rate_widens_the_window_at_most_twofold_a_second() -> None:
    hint = RetryHint(now=0.0)
    windows = []
    for t in range(10):  # thousands refused a second against 40 handshakes a second
        _second(hint, float(t), refusals=4000, completions=40)
        windows.append(hint.window)
    assert windows[:4] == [MIN_WINDOW, 0.5, 1.0, 2.0]  # the first second only measures
    assert windows[-1] == MAX_WINDOW


def test_the_window_holds_where_the_crowd_comes_back_at_the_servers_rate() -> None:
    hint = RetryHint(now=0.0, window=10.0)
    # 1,000 clients spread over 10 s come back 200 times a second; 100 get in, 100 refused
    for t in range(3):
        _second(hint, float(t), refusals=200, completions=100)
    hint.tick(3.0)
    assert hint.window == 10.0  # refused / (2 x completed) = 1: the window is right
    _second(hint, 3.0, refusals=400, completions=100)
    hint.tick(4.0)
    assert hint.window == 20.0  # twice the crowd: twice the window


def test_without_refusals_the_window_halves_back_to_its_minimum() -> None:
    hint = RetryHint(now=0.0, window=8.0)
    for t in range(1, 8):
        hint.tick(float(t))  # clients come, none refused
    assert hint.window == MIN_WINDOW


@given(st.floats(min_value=0.0, max_value=1e4, allow_nan=False))
def test_the_reason_phrase_carries_the_window(window: float) -> None:
    lost = ConnectionLost(f"connection closed (error code 2): {busy_reason(window)}", 2)
    parsed = retry_within(lost)
    assert parsed is not None and abs(parsed - window) <= 0.005


def test_other_closes_carry_no_window() -> None:
    assert retry_within(ConnectionLost("connection closed (error code 2): no reason given", 2)) is None
    assert retry_within(ConnectionLost(f"closed: {busy_reason(3.0)}", 0x1)) is None  # not a refusal
