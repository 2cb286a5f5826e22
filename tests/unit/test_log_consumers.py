"""The consumer registry and its rule: acks follow the ack consumers, truncation every consumer.

Real files in a temporary log directory; Hypothesis checks the rule over
arbitrary consumers and positions.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aqueduct.bridge.storage.consumers import (
    Consumer,
    ConsumerError,
    StreamSelection,
    check_not_dropped,
    drop_consumer,
    frontiers,
    lagging,
    load_consumers,
    register_consumer,
)

names = st.sampled_from(["a", "b", "c", "d"])
positions = st.dictionaries(st.integers(0, 3), st.integers(0, 100), max_size=4)
consumers = st.dictionaries(
    names,
    st.builds(Consumer, name=st.just(""), acks=st.booleans(), start=positions,
              registered_at=st.just(0.0), dropped=st.none() | st.just("gone")),  # fmt: skip
    max_size=4,
)


@given(consumers, st.dictionaries(names, positions, max_size=4))
def test_truncation_never_passes_a_live_consumer_nor_the_acks(cs: dict, committed: dict) -> None:
    cs = {n: Consumer(n, c.acks, c.start, c.registered_at, c.dropped) for n, c in cs.items()}
    streams = range(4)
    f = frontiers(cs, committed, {sid: f"s{sid}" for sid in streams})
    live = [c for c in cs.values() if c.dropped is None]
    if not any(c.acks for c in live):
        assert f.acks == {} and f.truncate == {}  # nothing drives acks: keep everything
        return
    for sid in streams:
        reached = {c.name: max(committed.get(c.name, {}).get(sid, 0), c.start.get(sid, 0)) for c in live}
        assert f.truncate[sid] <= f.acks[sid]
        assert f.truncate[sid] == min(reached.values())
        assert f.acks[sid] == min(reached[c.name] for c in live if c.acks)


def test_a_restarted_consumer_keeps_its_entry_and_may_start_driving_acks(tmp_path: Path) -> None:
    first = register_consumer(tmp_path, "job", {1: 5}, now=1.0)
    again = register_consumer(tmp_path, "job", {1: 9}, acks=True, now=2.0)
    assert (again.start, again.registered_at, again.acks) == (first.start, 1.0, True)
    assert load_consumers(tmp_path)["job"] == again


def test_a_dropped_consumer_fails_its_query_until_it_registers_anew(tmp_path: Path) -> None:
    register_consumer(tmp_path, "audit", {})
    check_not_dropped(tmp_path, "audit")
    drop_consumer(tmp_path, "audit", "dropped by hand")
    with pytest.raises(ConsumerError, match=r"consumer 'audit' was dropped \(dropped by hand\)"):
        check_not_dropped(tmp_path, "audit")
    anew = register_consumer(tmp_path, "audit", {1: 7})  # a new query under that name begins anew
    assert anew.dropped is None and anew.start == {1: 7}
    check_not_dropped(tmp_path, "audit")
    with pytest.raises(ConsumerError, match="no consumer named 'nobody'"):
        drop_consumer(tmp_path, "nobody", "x")


@pytest.mark.parametrize("name", ["", "a/b", "..", "x" * 129, "sp ace"])
def test_consumer_names_are_checked(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConsumerError, match="consumer name must be 1-128 letters"):
        register_consumer(tmp_path, name, {})
    assert load_consumers(tmp_path) == {}


def test_lagging_counts_records_behind_and_never_names_an_ack_consumer() -> None:
    cs = {
        "acks": Consumer("acks", True, {}, 0.0),
        "slow": Consumer("slow", False, {}, 0.0),
        "late": Consumer("late", False, {1: 90}, 0.0),
        "gone": Consumer("gone", False, {}, 0.0, dropped="x"),
    }
    complete = {1: 100, 2: 10}
    assert lagging(cs, {"slow": {1: 50}}, complete, max_lag=50, names={}) == {"slow": 60}
    assert lagging(cs, {"slow": {1: 50}}, complete, max_lag=60, names={}) == {}


def test_a_consumer_of_some_streams_neither_pins_nor_acks_the_others(tmp_path: Path) -> None:
    names = {1: "orders-eu", 2: "orders-us", 3: "clicks"}
    cs = {
        "all": Consumer("all", acks=True),
        "eu": Consumer("eu", reads=StreamSelection.parse(None, "orders-eu")),
        "clicks": Consumer("clicks", acks=True, reads=StreamSelection.parse("3", None)),
    }
    committed = {"all": {1: 10, 2: 10, 3: 10}, "eu": {1: 4}, "clicks": {3: 6}}
    f = frontiers(cs, committed, names)
    assert f.acks == {1: 10, 2: 10, 3: 6}
    assert f.truncate == {1: 4, 2: 10, 3: 6}  # "eu" pins stream 1 only
    # Without "all", stream 1 and 2 have no ack consumer: never acked, never truncated.
    del cs["all"]
    assert frontiers(cs, committed, names).acks == {3: 6}
    # Saved and loaded with what it reads; a restart with another filter replaces it.
    register_consumer(tmp_path, "eu", {}, reads=StreamSelection.parse(None, "orders-eu"))
    assert load_consumers(tmp_path)["eu"].reads.selects(1, "orders-eu")
    register_consumer(tmp_path, "eu", {}, reads=StreamSelection.parse("2,3", None))
    assert load_consumers(tmp_path)["eu"].reads.to_json() == {"streams": [2, 3]}


@pytest.mark.parametrize(
    ("streams", "pattern", "message"),
    [
        ("1,x", None, "streams must be stream ids separated by commas, e.g. '1,2,7', got '1,x'"),
        ("", None, "streams must be stream ids"),
        (None, "orders-(", "streamPattern 'orders-(' is not a regular expression"),
        ("1", "orders", "streams and streamPattern exclude each other"),
    ],
)
def test_stream_selections_are_checked(streams: str | None, pattern: str | None, message: str) -> None:
    with pytest.raises(ConsumerError, match=re.escape(message)):
        StreamSelection.parse(streams, pattern)
