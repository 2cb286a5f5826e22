"""Polling helper shared by tests that wait for a state reached in the background."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest


async def wait_until(predicate: Callable[[], bool], what: str, timeout: float) -> None:
    """Wait until ``predicate()`` holds, polling; fail naming ``what`` after ``timeout`` seconds.

    The timeout only turns a hang into a readable failure; no test relies on speed.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


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
