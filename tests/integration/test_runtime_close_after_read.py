"""Closing a receiver must not take back what the application already read.

CLOSE_RECEIVER nacks every number not yet acked; a message the application
already dequeued has to be acked first, or a handle it carried (which the
application holds) would be reported lost to the peer.
"""

from __future__ import annotations

import asyncio

import pytest

import aqueduct


@pytest.mark.parametrize("mode", ["ordered", "unreliable"])
async def test_handle_read_just_before_close_keeps_working(linked, client_backend, mode: str) -> None:
    if mode == "unreliable" and client_backend == "picoquic":
        # picoquic sends a datagram and the SENT_UNRELIABLE announcing it in
        # separate packets: the application can read the message before the
        # announcement arrives, and CLOSE_RECEIVER may only ack numbers below
        # the announced total (spec), so the close nacks it and the handle it
        # carried is lost for the peer. About 1 run in 10; aioquic packs both
        # into one packet. A core fix (hold the close until dequeued numbers
        # are announced) is open in issue 19's note.
        pytest.skip("known race: unreliable message read before its announcement (issue 19 note)")
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
