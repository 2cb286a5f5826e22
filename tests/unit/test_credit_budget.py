"""The shared credit budget: what all sessions hold stays bounded by configuration."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aqueduct.bridge.ingest.credit_budget import (
    ASSUMED_RECORD_BYTES,
    START_CREDITS,
    CreditBudget,
    RecordSize,
)


def test_sessions_start_small_and_grow_to_their_share_by_using_credits() -> None:
    b = CreditBudget(total=1000, per_session=400)
    assert b.join("a") == START_CREDITS
    assert b.earned("a", START_CREDITS) == 2 * START_CREDITS  # used them all: doubled
    assert b.earned("a", 128) == 256
    assert b.earned("a", 256) == 400  # capped per session


def test_a_new_session_takes_its_share_from_the_sessions_above_it() -> None:
    b = CreditBudget(total=200, per_session=200, start=200)
    assert b.join("a") == 200 and b.free == 0
    assert b.join("b") == 1  # pool empty: one credit, so it can move
    assert b.share == 100
    assert b.earned("a", 150) == 50  # 150 came back; a gets only enough to hold its share
    assert b.held == {"a": 100, "b": 1}
    assert b.top_up("b") == 99  # the rest goes to b, up to its share
    b.leave("a")
    assert b.free == 100 and b.held == {"b": 100}


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"^credit budget and per-session credits must be positive, got 0 and 5$"):
        CreditBudget(total=0, per_session=5)


@settings(max_examples=200, deadline=None)
@given(
    total=st.integers(1, 500),
    per_session=st.integers(1, 300),
    ops=st.lists(st.tuples(st.sampled_from(["join", "spend", "top_up", "leave"]), st.integers(0, 9)), max_size=120),
)
def test_held_credits_never_exceed_the_budget_plus_one_per_session(total, per_session, ops) -> None:
    b = CreditBudget(total, per_session)
    for op, k in ops:
        if op == "join" and k not in b.held:
            b.join(k)
        elif op == "spend" and k in b.held:
            b.earned(k, b.held[k])  # all it held became durable
        elif op == "top_up" and k in b.held:
            b.top_up(k)
        elif op == "leave":
            b.leave(k)
        held = sum(b.held.values())
        assert held + b.free == total
        assert held <= max(total, 0) + len(b.held)
        assert all(v >= 0 for v in b.held.values())
        assert all(v <= max(per_session, 1) for v in b.held.values())


def test_a_byte_budget_follows_the_size_of_the_records_that_arrive() -> None:
    size = RecordSize()
    assert size.records_in(100 * 1024) == 100 * 1024 // ASSUMED_RECORD_BYTES
    for _ in range(40):  # 10 KiB records, commit after commit
        size.made_durable(records=8, nbytes=8 * 10 * 1024)
    assert size.records_in(100 * 1024) == 10
    size.made_durable(records=0, nbytes=0)  # an empty group says nothing about sizes
    assert size.records_in(100 * 1024) == 10
    assert size.records_in(10) == 1  # never no credit at all


def test_a_shrunk_pool_grants_nothing_until_the_credits_held_come_back() -> None:
    b = CreditBudget(total=100, per_session=100, start=100)
    assert b.join("a") == 100
    b.resize(10)  # records turned out ten times larger
    assert b.free == -90 and b.held == {"a": 100}
    assert b.earned("a", 50) == 0  # 50 back, still 40 over the smaller pool
    assert b.earned("a", 50) == 10  # all back: the session may hold the new pool
    with pytest.raises(ValueError, match="credit budget must be positive, got 0"):
        b.resize(0)
