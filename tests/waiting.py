"""Waiting helpers: for a state reached in the background, and for the events a negative check needs.

A negative check ("nothing was acked yet", "send() still waits") passes
trivially if it runs before the thing that could have broken it had its
chance: on a slow machine a fixed sleep is exactly that. Such a check
first waits for an event that proves the chance came and went (a poll of
the commit files ran, a group commit finished, the peer acknowledged
everything in flight): :func:`wait_until` for a state, :func:`after` for
a count of events, :func:`count_calls` to count calls of a live object's
method without changing what it does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest


async def wait_until(predicate: Callable[[], bool], what: str, timeout: float, every: float = 0.01) -> None:
    """Wait until ``predicate()`` holds, polling every ``every`` seconds; fail naming ``what`` after ``timeout``.

    The timeout only turns a hang into a readable failure; no test relies on speed.
    A costly predicate (reading a Parquet sink) polls less often.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(every)


async def after(events: Callable[[], int], what: str, timeout: float, more: int = 1) -> None:
    """Wait until the count ``events()`` grew by ``more`` from now; fail naming ``what`` after ``timeout``.

    ``more=2`` when the first event may have begun before the state under
    test was reached: the second began after it.
    """
    start = events()
    await wait_until(lambda: events() >= start + more, f"{more} more {what}", timeout)


def count_calls(obj: object, name: str) -> Callable[[], int]:
    """Count the calls of ``obj.name`` from now on (as an instance attribute; it still does its work).

    Returns the count's reader, for :func:`after`.
    """
    method = getattr(obj, name)
    calls = 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return method(*args, **kwargs)

    setattr(obj, name, counted)
    return lambda: calls


async def finish(proc: asyncio.subprocess.Process, timeout: float) -> tuple[int, bytes, str]:
    """``proc``'s exit code, stdout and stderr once it exits; killed (and the test failed) after ``timeout``.

    The timeout only turns a hung child into a failure instead of a hung suite.
    """
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out, err.decode()
