"""The lossy network model decides reproducibly and roughly as configured.

These run without sockets: :class:`interop.network.Link` is sans-IO, so a
scenario can be checked over thousands of datagrams in milliseconds, and an
interop failure can be replayed from its seed.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interop.network import (
    SCENARIOS,
    Action,
    DropReason,
    Link,
    LinkConfig,
    NetworkConfig,
    scenario,
)

N = 20_000


def run(link: Link, count: int = N, step: float = 0.001) -> list:
    return [link.submit(i * step) for i in range(count)]


def test_same_seed_same_decisions_and_different_seed_differs() -> None:
    cfg = LinkConfig(drop_rate=0.1, burst_rate=0.01, burst_length=3, duplicate_rate=0.1,
                     reorder_rate=0.1, jitter=0.01)
    a = run(Link(cfg, seed=7), 2000)
    b = run(Link(cfg, seed=7), 2000)
    c = run(Link(cfg, seed=8), 2000)
    assert a == b
    assert a != c


def test_directions_are_seeded_independently() -> None:
    link = LinkConfig(drop_rate=0.2)
    c2s, s2c = NetworkConfig(client_to_server=link, server_to_client=link, seed=3).links()
    assert [d.action for d in run(c2s, 500)] != [d.action for d in run(s2c, 500)]


def test_clean_link_forwards_everything_in_order_without_delay() -> None:
    decisions = run(Link(LinkConfig(), seed=1), 1000)
    assert all(d.action is Action.FORWARD and d.delays == (0.0,) for d in decisions)
    assert [d.index for d in decisions] == list(range(1000))


def test_random_loss_rate_is_roughly_as_configured() -> None:
    drops = sum(d.action is Action.DROP for d in run(Link(LinkConfig(drop_rate=0.05), 1)))
    assert 0.04 * N < drops < 0.06 * N


def test_bursts_drop_runs_of_consecutive_datagrams() -> None:
    cfg = LinkConfig(burst_rate=0.01, burst_length=5.0)
    decisions = run(Link(cfg, seed=2))
    runs: list[int] = []
    current = 0
    for d in decisions:
        if d.reason is DropReason.BURST:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    mean = sum(runs) / len(runs)
    assert 4.0 < mean < 6.0, mean
    # Stationary share of the bad state: 0.01 / (0.01 + 1/5) ~ 4.8 %.
    burst_share = sum(runs) / N
    assert 0.035 < burst_share < 0.06, burst_share


def test_loss_scenario_loses_about_five_percent_with_bursts() -> None:
    c2s, _ = scenario("loss", seed=11).links()
    reasons = Counter(d.reason for d in run(c2s) if d.action is Action.DROP)
    total = sum(reasons.values())
    assert 0.035 * N < total < 0.07 * N
    assert reasons[DropReason.BURST] > 0 and reasons[DropReason.RANDOM] > 0


def test_drop_by_index_drops_exactly_those_datagrams() -> None:
    decisions = run(Link(LinkConfig(drop_indices=frozenset({0, 3, 4, 99})), 1), 200)
    dropped = {d.index for d in decisions if d.action is Action.DROP}
    assert dropped == {0, 3, 4, 99}
    assert all(d.reason is DropReason.INDEX for d in decisions if d.action is Action.DROP)


def test_duplicates_send_two_copies_at_roughly_the_configured_rate() -> None:
    decisions = run(Link(LinkConfig(duplicate_rate=0.1), 4))
    dups = sum(d.duplicated for d in decisions)
    assert 0.08 * N < dups < 0.12 * N
    assert all(len(d.delays) in (1, 2) for d in decisions)


def test_delay_and_jitter_stay_within_bounds() -> None:
    decisions = run(Link(LinkConfig(delay=0.01, jitter=0.005, duplicate_rate=0.5), 5), 2000)
    delays = [x for d in decisions for x in d.delays]
    assert all(0.01 <= x < 0.015 for x in delays)
    assert max(delays) - min(delays) > 0.004


def test_reordered_datagram_is_released_after_the_gap() -> None:
    cfg = LinkConfig(reorder_rate=0.1, reorder_gap=3, reorder_max_hold=10.0)
    link = Link(cfg, seed=6)
    sent_order: list[int] = []
    for i in range(5000):
        d = link.submit(i * 0.001)
        if d.action is Action.FORWARD:
            sent_order.append(d.index)
        sent_order.extend(d.release)
    sent_order.extend(link.expire(1e9))
    # Nothing lost, nothing duplicated, but the order changed.
    assert sorted(sent_order) == list(range(5000))
    assert sent_order != list(range(5000))
    # A held datagram is overtaken by exactly `gap` datagrams that were not themselves held.
    held = 0
    for pos, index in enumerate(sent_order):
        if pos > 0 and index < sent_order[pos - 1]:
            held += 1
    assert held > 0.05 * 5000


def test_held_datagram_is_released_by_the_timer_when_traffic_stops() -> None:
    link = Link(LinkConfig(reorder_rate=1.0, reorder_max_hold=0.05), seed=0)
    d = link.submit(0.0)
    assert d.action is Action.HOLD
    assert link.next_expiry() == pytest.approx(0.05)
    assert link.expire(0.01) == ()
    assert link.expire(0.06) == (0,)
    assert link.held == () and link.next_expiry() is None


def test_blackhole_drops_everything_in_down_periods_only() -> None:
    cfg = LinkConfig(blackhole_up=1.0, blackhole_down=0.5)
    link = Link(cfg, seed=0)
    for i in range(3000):
        now = i * 0.001
        d = link.submit(now)
        in_down = 1.0 <= now % 1.5
        assert (d.reason is DropReason.BLACKHOLE) == in_down, now


def test_invalid_configuration_is_refused_with_the_field_name() -> None:
    with pytest.raises(ValueError, match="drop_rate"):
        LinkConfig(drop_rate=1.5)
    with pytest.raises(ValueError, match="blackhole_up"):
        LinkConfig(blackhole_down=1.0)
    with pytest.raises(ValueError, match="unknown scenario 'storm'"):
        scenario("storm")


def test_named_scenarios_exist() -> None:
    assert {"clean", "loss", "reorder", "duplicate", "blackhole"} <= set(SCENARIOS)


probability = st.floats(min_value=0.0, max_value=1.0)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=2**32),
    drop=probability,
    burst=probability,
    burst_length=st.floats(min_value=1.0, max_value=10.0),
    reorder=probability,
    gap=st.integers(min_value=1, max_value=6),
    duplicate=probability,
)
def test_every_datagram_is_dropped_or_sent_exactly_once(
    seed: int, drop: float, burst: float, burst_length: float, reorder: float, gap: int,
    duplicate: float,
) -> None:
    """Whatever the impairments, a datagram is never lost track of: one fate each."""
    cfg = LinkConfig(drop_rate=drop, burst_rate=burst, burst_length=burst_length,
                     reorder_rate=reorder, reorder_gap=gap, duplicate_rate=duplicate)
    link = Link(cfg, seed)
    fates: Counter[int] = Counter()
    for i in range(300):
        d = link.submit(i * 0.001)
        if d.action is not Action.HOLD:
            fates[d.index] += 1
        fates.update(d.release)
        assert d.action is Action.DROP or 1 <= len(d.delays) <= 2
    fates.update(link.expire(float("inf")))
    assert fates == Counter(range(300))
