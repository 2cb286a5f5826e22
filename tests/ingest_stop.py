"""Stopping an ingest the tests ran by hand, in the order a bridge stops: listener, group commits, log."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

from aqueduct.bridge.storage.log import DurableLog


class _Listener(Protocol):
    async def close(self) -> None: ...


async def stop_ingest(server: _Listener, group_commits: asyncio.Task, log: DurableLog | None = None) -> None:
    """Close ``server`` (no new frames), cancel the ingest's ``run()`` task, then close ``log`` if given.

    The log is closed in a thread, behind every write already queued on its
    I/O thread, so the event loop never blocks on it.
    """
    await server.close()
    group_commits.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await group_commits
    if log is not None:
        await asyncio.to_thread(log.close)
