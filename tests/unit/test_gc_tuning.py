"""The serving bridge's garbage collector: start-up's live objects frozen, its garbage not, thresholds raised.

``tune_for_serving`` changes this whole (test) process's collector, so every
test puts the interpreter's state back afterwards.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from aqueduct.bridge.app.gc_tuning import THRESHOLDS, tune_for_serving


class Node:
    """A tracked object that can sit in a reference cycle."""

    other: Node | None = None


@pytest.fixture(autouse=True)
def interpreter_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def _tracked(obj: object) -> bool:
    """Whether a collection would visit ``obj`` (frozen objects are in no generation)."""
    return any(o is obj for generation in range(3) for o in gc.get_objects(generation))


def test_what_start_up_left_alive_is_frozen_and_what_comes_later_is_collected_as_usual() -> None:
    long_lived = Node()
    assert _tracked(long_lived)
    frozen = tune_for_serving()
    # What it reports is what it froze. A frozen object that dies leaves the
    # permanent generation, and another thread (pytest-xdist's execnet) may
    # free some between the two reads: the count can only have fallen.
    assert 0 < gc.get_freeze_count() <= frozen
    assert not _tracked(long_lived)  # no full collection walks it again
    later = Node()
    assert _tracked(later)


def test_start_up_garbage_is_collected_before_the_freeze_not_kept_for_ever() -> None:
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only the collector frees it
    gone = weakref.ref(a)
    del a, b
    tune_for_serving()
    assert gone() is None


def test_collections_come_less_often_than_the_interpreters() -> None:
    tune_for_serving()
    assert gc.get_threshold() == THRESHOLDS
    young, middle, old = THRESHOLDS
    assert young > 700 and young * middle > 700 * 10 and young * middle * old > 700 * 10 * 10
    assert gc.isenabled()  # cyclic garbage is still collected
