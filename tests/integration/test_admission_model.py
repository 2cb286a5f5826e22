"""The storm model (bench.admission_model) runs the bridge's own RetryHint: every producer gets in, never faster than the server can."""

from __future__ import annotations

import pytest

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
