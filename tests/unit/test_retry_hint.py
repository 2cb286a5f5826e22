"""A busy server's retry hint: each refused client is told a slot of a schedule paced at the server's capacity."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aqueduct.proto.errors import ConnectionLost
from aqueduct.runtime.retry_hint import (
    MAX_WINDOW,
    MIN_WINDOW,
    PRIOR_DURATION,
    RetryHint,
    RetryWindow,
    busy_reason,
    retry_window,
    retry_within,
)


def _saturated(hint: RetryHint, duration: float, completions: int) -> None:
    """``completions`` handshakes completed, each after ``duration`` seconds with every slot taken."""
    for _ in range(completions):
        hint.completed(duration)


def test_capacity_is_the_slots_over_the_measured_handshake_duration() -> None:
    hint = RetryHint(now=0.0, slots=64)
    assert hint.capacity == 64 / PRIOR_DURATION  # nothing measured yet
    _saturated(hint, duration=1.6, completions=200)  # 64 at once, each 1.6 s: 40 a second
    assert hint.capacity == pytest.approx(40.0, rel=1e-3)


def test_the_refused_are_spread_over_exactly_the_time_the_server_needs_for_them() -> None:
    hint = RetryHint(now=0.0, slots=64)
    _saturated(hint, duration=1.6, completions=200)
    windows = [hint.refused(now=0.0) for _ in range(200)]  # a crowd of 200 refused at once
    starts = [w.not_before for w in windows]
    assert starts[0] == 0.0
    assert starts[-1] == pytest.approx(199 / hint.capacity)  # 5 s at 40 a second, not 60
    assert all(w.within - w.not_before == pytest.approx(MIN_WINDOW) for w in windows)  # jitter inside the slot


def test_a_refusal_after_the_schedule_drained_starts_now() -> None:
    hint = RetryHint(now=0.0, slots=1)
    for _ in range(8):
        hint.refused(now=0.0)  # slots promised up to 2 s
    assert hint.refused(now=100.0) == RetryWindow(0.0, MIN_WINDOW)


def test_nothing_is_promised_beyond_the_cap() -> None:
    hint = RetryHint(now=0.0, slots=1)
    _saturated(hint, duration=1.0, completions=500)  # one a second
    windows = [hint.refused(now=0.0) for _ in range(100)]
    assert windows[-1].within == MAX_WINDOW  # told to come back at the cap, in a window one slot wide
    assert windows[-1].not_before == pytest.approx(MAX_WINDOW - 1.0)
    assert hint.next_slot <= MAX_WINDOW


@given(
    st.integers(min_value=1, max_value=1000),
    st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=5.0),  # seconds since the previous event
            st.one_of(st.none(), st.floats(min_value=0.0, max_value=100.0)),  # refused, or completed after that long
        ),
        max_size=300,
    ),
)
def test_the_schedule_never_names_more_than_the_cap_nor_promises_more_than_capacity(
    slots: int, events: list[tuple[float, float | None]]
) -> None:
    hint = RetryHint(now=0.0, slots=slots)
    now = 0.0
    promised: tuple[float, float] | None = None  # the last slot's start (absolute) and the capacity then
    for gap, duration in events:
        now += gap
        if duration is not None:
            hint.completed(duration)
            continue
        capacity = hint.capacity
        window = hint.refused(now)
        assert 0.0 <= window.not_before < window.within <= MAX_WINDOW
        if window.within < MAX_WINDOW:  # a slot of the schedule: no closer to the last than capacity allowed
            if promised is not None:
                assert now + window.not_before - promised[0] >= (1 / promised[1]) * (1 - 1e-9)
            promised = (now + window.not_before, capacity)
    assert not hasattr(hint, "__dict__")  # O(1) state, no per-client memory: a few numbers
    assert all(isinstance(getattr(hint, name), (int, float)) for name in RetryHint.__slots__)


@given(st.floats(min_value=0.0, max_value=1e4), st.floats(min_value=0.0, max_value=1e4))
def test_the_reason_phrase_carries_the_window(not_before: float, width: float) -> None:
    window = RetryWindow(not_before, not_before + width)
    lost = ConnectionLost(f"connection closed (error code 2): {busy_reason(window)}", 2)
    parsed = retry_window(lost)
    assert parsed is not None
    assert abs(parsed.not_before - window.not_before) <= 0.005 and abs(parsed.within - window.within) <= 0.005
    assert retry_within(lost) == parsed.within


def test_an_older_servers_phrase_means_from_now_on() -> None:
    lost = ConnectionLost("connection closed (error code 2): busy: retry within 4.20 s", 2)
    assert retry_window(lost) == RetryWindow(0.0, 4.2)


def test_other_closes_carry_no_window() -> None:
    assert retry_within(ConnectionLost("connection closed (error code 2): no reason given", 2)) is None
    refusal = busy_reason(RetryWindow(0.0, 3.0))
    assert retry_window(ConnectionLost(f"closed: {refusal}", 0x1)) is None  # not a refusal


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="^slots must be at least 1, got 0$"):
        RetryHint(now=0.0, slots=0)
