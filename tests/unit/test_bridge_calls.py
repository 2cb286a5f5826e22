"""The failover planner's calls to its bridges: side by side, bounded, every call ended before an error is raised."""

from __future__ import annotations

import pickle
import threading

import pytest

from aqueduct.bridge.source.bridge_calls import BridgeCalls


def test_calls_to_bridges_overlap() -> None:
    """Four calls that each wait for all four to have started: they complete only if they run at once."""
    together = threading.Barrier(4, timeout=10)  # a hang guard: sequential calls would break it
    calls = BridgeCalls(4)
    assert calls.each(["a", "b", "c", "d"], lambda name: (together.wait(), name)[1]) == {
        "a": "a", "b": "b", "c": "c", "d": "d",
    }  # fmt: skip


def test_no_more_calls_at_once_than_the_limit() -> None:
    lock = threading.Lock()
    running, most = 0, 0
    release = threading.Event()

    def call(name: str) -> str:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            if running == 2:
                release.set()
        release.wait(30)
        with lock:
            running -= 1
        return name

    assert list(BridgeCalls(2).each([str(i) for i in range(8)], call)) == [str(i) for i in range(8)]
    assert most == 2


def test_one_call_at_a_time_runs_on_the_callers_thread() -> None:
    here = threading.get_ident()
    assert BridgeCalls(1).each(["a", "b"], lambda _: threading.get_ident()) == {"a": here, "b": here}
    assert BridgeCalls(8).each(["a"], lambda _: threading.get_ident()) == {"a": here}


def test_a_failing_call_is_raised_after_every_other_call_ended() -> None:
    ended: list[str] = []
    b_may_end = threading.Event()

    def call(name: str) -> str:
        if name == "a":
            b_may_end.set()
            raise LookupError("bridge a")
        b_may_end.wait(30)
        ended.append(name)
        return name

    with pytest.raises(LookupError, match="bridge a"):
        BridgeCalls(4).each(["a", "b", "c"], call)
    assert sorted(ended) == ["b", "c"]


def test_the_pool_stays_on_the_driver() -> None:
    calls = BridgeCalls(3)
    calls.each(["a", "b"], str.upper)
    copy = pickle.loads(pickle.dumps(calls))
    assert copy.limit == 3 and copy.each(["x", "y"], str.upper) == {"x": "X", "y": "Y"}
    with pytest.raises(ValueError, match="at least one call at a time"):
        BridgeCalls(0)
