"""An in-process bridge without Spark whose acks a test drives: the fixture body several test files share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aqueduct.bridge.app.service import Bridge, BridgeConfig


@asynccontextmanager
async def bridge_without_spark(config: BridgeConfig) -> AsyncIterator[Bridge]:
    """``config``'s bridge started with no query, ``reports`` registered as the consumer that drives acks."""
    b = Bridge(config)
    await b.start(run_query=False)
    assert b.positions is not None
    b.positions.register("reports", acks=True)
    try:
        yield b
    finally:
        await b.stop()
