"""Channel trees over loopback QUIC, and the topology rules for sending handles."""

from __future__ import annotations

import asyncio

import pytest

import aqueduct

TIMEOUT = 60


async def test_three_level_tree_carries_messages_both_ways(linked):
    tx, conn = linked
    # level 1: a Receiver sent on the entrypoint
    l1_tx, l1_rx = aqueduct.channel()
    await tx.send({"level": 1, "rx": l1_rx})
    # level 2: a Receiver sent on the level-1 channel
    l2_tx, l2_rx = aqueduct.channel()
    await l1_tx.send({"level": 2, "rx": l2_rx})
    # level 3: a Sender (server -> client) sent on the level-2 channel
    l3_tx, l3_rx = aqueduct.channel()
    await l2_tx.send({"level": 3, "reply": l3_tx})

    async def server_side():
        first = await conn.entrypoint.recv()
        second = await first["rx"].recv()
        third = await second["rx"].recv()
        reply = third["reply"]
        async for value in second["rx"]:
            await reply.send(value * 2)
        await reply.finish()

    server = asyncio.create_task(server_side())
    for i in range(100):
        await l2_tx.send(i)
    await l2_tx.finish()
    got = await asyncio.wait_for(_collect(l3_rx), TIMEOUT)
    await asyncio.wait_for(server, TIMEOUT)
    assert got == [2 * i for i in range(100)]


async def _collect(rx):
    return [value async for value in rx]


async def test_a_handle_can_be_attached_only_once(linked):
    tx, _conn = linked
    _sub_tx, sub_rx = aqueduct.channel()
    await tx.send(sub_rx)
    with pytest.raises(aqueduct.LocalProtocolError, match="already sent away"):
        await tx.send(sub_rx)


async def test_both_halves_cannot_be_sent_away(linked):
    tx, _conn = linked
    a_tx, a_rx = aqueduct.channel()
    with pytest.raises(aqueduct.LocalProtocolError, match="both halves"):
        await tx.send([a_tx, a_rx])
    # nothing was attached by the failed send: one half alone still goes
    await tx.send(a_rx)
    with pytest.raises(aqueduct.LocalProtocolError, match="both halves"):
        await tx.send(a_tx)


async def test_received_handle_cannot_be_sent_on_or_back(linked):
    tx, conn = linked
    reply_tx, _reply_rx = aqueduct.channel()
    other_tx, _other_rx = aqueduct.channel()
    await tx.send({"reply": reply_tx, "other": other_tx})
    msg = await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT)
    with pytest.raises(aqueduct.LocalProtocolError, match="bunny-hopping"):
        await msg["other"].send({"back": msg["reply"]})


async def test_handle_from_one_connection_cannot_go_on_another(certs):
    server = await aqueduct.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key)
    async with server:
        tx_a = await aqueduct.connect("127.0.0.1", server.port, cafile=certs.ca)
        tx_b = await aqueduct.connect("127.0.0.1", server.port, cafile=certs.ca)
        async with tx_a, tx_b:
            from_a, _ = aqueduct.channel()
            to_b, _ = aqueduct.channel()
            conn_a = await asyncio.wait_for(server.accept(), TIMEOUT)
            conn_b = await asyncio.wait_for(server.accept(), TIMEOUT)
            await tx_a.send(from_a)
            await tx_b.send(to_b)
            handles = {}
            for conn in (conn_a, conn_b):
                handles[conn] = await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT)
            with pytest.raises(aqueduct.LocalProtocolError, match="bunny-hopping"):
                await handles[conn_b].send(handles[conn_a])


async def test_non_encodable_value_is_a_type_error(linked):
    tx, _conn = linked
    with pytest.raises(TypeError, match="neither CBOR-encodable nor a channel handle"):
        await tx.send({"x": object()})


async def test_channel_attached_to_an_evicted_message_is_lost_in_transit(certs):
    # The server grants a tiny window and never reads, so the client's unreliable
    # queue (max_queued=1) evicts its oldest message: the channel it carried is lost.
    server = await aqueduct.serve(
        "127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key, window=256
    )
    async with server:
        tx = await aqueduct.connect("127.0.0.1", server.port, cafile=certs.ca, max_queued=1)
        async with tx.connection:
            tx.unreliable()
            await tx.send(b"x" * 400)  # fills the window (nothing was outstanding)
            kept_tx, sent_rx = aqueduct.channel()
            await tx.send({"sub": sent_rx})  # queued behind the window
            await tx.send("evicts the previous message")
            with pytest.raises(aqueduct.LostInTransit):
                await kept_tx.send("never arrives")
