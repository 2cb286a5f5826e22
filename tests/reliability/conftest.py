"""Fixtures of the reliability suite: seeds, figures, and loop-crash detection.

Every test is seeded: ``RELIABILITY_SEED`` (default below) is mixed with the
test's name, so each test gets its own reproducible stream of faults and a
failure can be replayed with the seed printed in its summary line.
"""

from __future__ import annotations

import asyncio
import os
import random
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.reliability.faults import RESULTS_FILE, Figures

DEFAULT_SEED = 20261122


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """This test's seed: the run's base seed mixed with the test's name."""
    base = int(os.environ.get("RELIABILITY_SEED", DEFAULT_SEED))
    return base ^ zlib.crc32(request.node.name.encode())


@pytest.fixture
def rng(seed: int) -> random.Random:
    return random.Random(seed)


@pytest.fixture
def figures(
    request: pytest.FixtureRequest, seed: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Figures]:
    """The test's summary; published (printed + appended to the results file) even on failure."""
    fig = Figures(test=request.node.name, seed=seed)
    yield fig
    fig.publish(tmp_path_factory.getbasetemp() / RESULTS_FILE)


@pytest.fixture
async def loop_errors() -> AsyncIterator[list[dict[str, Any]]]:
    """Every error the event loop's exception handler sees during the test.

    A server task that dies with an exception (instead of answering bad
    input with an error frame) ends up here; the fuzz tests assert it stays
    empty.
    """
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        seen.append(context)
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    yield seen
    loop.set_exception_handler(previous)
