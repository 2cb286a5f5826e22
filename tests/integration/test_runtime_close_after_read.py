"""Closing a receiver must not take back what the application already read.

CLOSE_RECEIVER nacks every number not yet acked; a message the application
already dequeued has to be acked first, or a handle it carried (which the
application holds) would be reported lost to the peer. An unreliable one can
be acked only once its number is announced, so the close waits for that.
"""

from __future__ import annotations

import asyncio

import pytest

import aqueduct


@pytest.mark.parametrize("mode", ["ordered", "unreliable"])
async def test_handle_read_just_before_close_keeps_working(linked, mode: str) -> None:
    """Unreliable: the datagram may be read before its SENT_UNRELIABLE arrives (picoquic
    sends them in separate packets); the close then waits for the announcement."""
    tx, conn = linked
    if mode == "unreliable":
        tx.unreliable()
    reply_tx, reply_rx = aqueduct.channel()
    await tx.send({"reply": reply_tx})
    for n in range(5):
        await tx.send({"n": n})

    async with asyncio.timeout(20):  # recv() in this task (wait_for ran it as its own task before 3.12)
        msg = await conn.entrypoint.recv()
    await conn.entrypoint.close()  # at once, in the same turn: nothing read was handed over yet
    await msg["reply"].send("still here")
    await msg["reply"].finish()

    assert await asyncio.wait_for(reply_rx.recv(), 20) == "still here"
