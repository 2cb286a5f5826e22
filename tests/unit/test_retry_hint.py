"""A busy server's retry hint: the window its refusals ask clients to spread their retries over."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aqueduct.proto.errors import ConnectionLost
from aqueduct.runtime.retry_hint import MAX_WINDOW, MIN_WINDOW, RetryHint, busy_reason, retry_within


def _second(hint: RetryHint, now: float, arrivals: int, refusals: int, completions: int) -> None:
    """One second of traffic: arrivals, of which some refused, and completed handshakes."""
    for i in range(arrivals):
        hint.arrived(now + i / (arrivals + 1))
    for _ in range(refusals):
        hint.refused(now + 0.99)
    for _ in range(completions):
        hint.completed()


def test_a_crowd_many_times_the_handshake_rate_widens_the_window_until_it_matches() -> None:
    hint = RetryHint(now=0.0)
    windows = []
    for t in range(8):  # 2,000 attempts a second against 40 handshakes a second
        _second(hint, float(t), arrivals=2000, refusals=1960, completions=40)
        windows.append(hint.window)
    assert windows[0] == MIN_WINDOW  # the first second only measures
    assert windows[1:4] == [1.0, 4.0, 16.0]  # at most fourfold per second
    assert windows[-1] == MAX_WINDOW


def test_without_refusals_the_window_halves_back_to_its_minimum() -> None:
    hint = RetryHint(now=0.0, window=8.0)
    for t in range(1, 8):
        hint.arrived(float(t))  # clients come, none refused
    assert hint.window == MIN_WINDOW


@given(st.floats(min_value=0.0, max_value=1e4, allow_nan=False))
def test_the_reason_phrase_carries_the_window(window: float) -> None:
    lost = ConnectionLost(f"connection closed (error code 2): {busy_reason(window)}", 2)
    parsed = retry_within(lost)
    assert parsed is not None and abs(parsed - window) <= 0.005


def test_other_closes_carry_no_window() -> None:
    assert retry_within(ConnectionLost("connection closed (error code 2): no reason given", 2)) is None
    assert retry_within(ConnectionLost(f"closed: {busy_reason(3.0)}", 0x1)) is None  # not a refusal
