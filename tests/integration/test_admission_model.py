"""The storm model (bench.admission_model) runs the bridge's own HandshakeAdmission: every producer gets in, never faster than the server can."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aqueduct.runtime.retry_hint import MIN_WINDOW, PROBE_WINDOW
from bench.admission_model import simulate


@pytest.mark.parametrize("window", ["hint", "capacity", "fixed:5"])
def test_every_producer_gets_in_no_sooner_than_back_to_back_handshakes_allow(window: str) -> None:
    r = simulate(producers=300, capacity=50.0, slots=16, detect=10.0, window=window)
    assert r["ideal_s"] == 10.0 + 300 / 50.0
    assert r["ideal_s"] - 1 / 50.0 <= r["last_back_s"]
    assert r["refusals"] > 0  # 300 at once into 16 slots


def test_a_window_that_follows_capacity_never_names_more_than_the_crowd_needs() -> None:
    r = simulate(producers=300, capacity=50.0, slots=16, detect=0.0, window="capacity")
    assert r["window_max_s"] <= 300 / 50.0


@settings(max_examples=25, deadline=None)
@given(
    producers=st.integers(min_value=1, max_value=600),
    capacity=st.sampled_from([5.0, 13.0, 50.0, 80.0, 300.0, 600.0]),
    slots=st.integers(min_value=8, max_value=64),
    detect=st.sampled_from([0.0, 0.5, 10.0]),
    seed=st.integers(min_value=0, max_value=2**16),
)
@example(producers=553, capacity=50.0, slots=47, detect=0.0, seed=30)  # a long tail, found by Hypothesis
def test_producers_arriving_at_once_and_retrying_as_told_are_all_in_within_their_handshakes_time(
    producers: int, capacity: float, slots: int, detect: float, seed: int
) -> None:
    """N producers at once, each retrying as told, are all in by N handshakes back to back plus a bounded tail.

    The slack: the first probe a restarted server sends its crowd on (it
    has no rate yet), a turn's window, and the first producers' own backoff;
    and the tail. Each turn comes back at a random moment of its window, so
    the last few dozen of a crowd of hundreds trickle in with the server
    idle between them: up to 0.18 s per second of back-to-back handshakes
    beyond the fixed slack in 3,000 sampled storms (a crowd of 553 at 50/s
    was in 1.7 s later than the fixed slack alone allows); 0.3 bounds it.
    """
    r = simulate(producers, capacity, slots, detect, "hint", seed)
    tail = 0.3 * producers / capacity
    assert r["last_back_s"] <= r["ideal_s"] + PROBE_WINDOW + MIN_WINDOW + 0.5 + tail
    assert r["turns_issued"] <= producers  # a producer refused again kept its place: the queue never grew from repeats
