"""Channels over real loopback QUIC: delivery modes and how channels end."""

from __future__ import annotations

import asyncio
import gc

import pytest

import aqueduct

TIMEOUT = 60


async def collect(rx, limit=20_000):
    """Everything ``rx`` yields until it finishes (bounded in count and time)."""
    out = []

    async def run():
        async for value in rx:
            out.append(value)
            assert len(out) <= limit

    await asyncio.wait_for(run(), TIMEOUT)
    return out


async def test_ten_thousand_ordered_messages_arrive_in_order(linked):
    tx, conn = linked

    async def produce():
        for i in range(10_000):
            await tx.send(i)
        await tx.finish()

    producer = asyncio.create_task(produce())
    got = await collect(conn.entrypoint)
    await asyncio.wait_for(producer, TIMEOUT)
    assert got == list(range(10_000))


async def test_send_many_hands_over_a_batch_in_order_past_the_window(linked):
    """Raw bytes (the fast path) and CBOR values mixed, far more than one send window holds."""
    tx, conn = linked
    batch = [b"%06d" % i if i % 100 else {"n": i} for i in range(50_000)]

    async def produce() -> int:
        n = await tx.send_many(batch)
        await tx.finish()
        return n

    producer = asyncio.create_task(produce())
    got = await collect(conn.entrypoint, limit=len(batch))
    assert await asyncio.wait_for(producer, TIMEOUT) == len(batch)
    assert got == batch


async def test_send_many_on_a_local_pair_and_after_the_receiver_closed():
    tx, rx = aqueduct.channel(capacity=4)
    sent = asyncio.create_task(tx.send_many(iter([b"a", "b", 3, b"d", b"e", b"f"])))
    assert [await rx.recv() for _ in range(6)] == [b"a", "b", 3, b"d", b"e", b"f"]
    assert await sent == 6
    await rx.close()
    with pytest.raises(aqueduct.ReceiverClosed):
        await tx.send_many([b"late"])


async def test_unordered_messages_all_arrive(linked):
    tx, conn = linked
    tx.unordered()
    for i in range(1000):
        await tx.send({"i": i, "pad": "x" * (i % 50)})
    await tx.finish()
    got = await collect(conn.entrypoint)
    assert sorted(m["i"] for m in got) == list(range(1000))


async def test_unreliable_messages_arrive_at_most_once(linked):
    tx, conn = linked
    tx.unreliable()
    for i in range(200):
        await tx.send(i)
    await tx.finish()
    got = await collect(conn.entrypoint)
    assert len(got) == len(set(got)) and set(got) <= set(range(200))


async def test_raw_bytes_and_large_values(linked):
    tx, conn = linked
    blob = bytes(range(256)) * 8192  # 2 MiB, more than one send window
    collector = asyncio.create_task(collect(conn.entrypoint))
    await tx.send(blob)
    await tx.send({"blob": blob[:1000]})
    await tx.finish()  # returns once the receiver has everything
    got = await collector
    assert got[0] == blob and got[1] == {"blob": blob[:1000]}


async def test_recv_many_takes_what_waits_in_order_then_raises_at_the_end(linked):
    tx, conn = linked
    values = [b"%d" % n if n % 7 else {"n": n} for n in range(5000)]
    sent = asyncio.create_task(tx.send_many(values))
    rx, got, sizes = conn.entrypoint, [], []
    with pytest.raises(aqueduct.Finished):
        async with asyncio.timeout(TIMEOUT):
            while True:
                batch = await rx.recv_many(limit=300)
                sizes.append(len(batch))
                got += batch
                if len(got) == len(values):
                    await tx.finish()
    assert await sent == len(values)
    assert got == values
    assert 1 <= min(sizes) and max(sizes) <= 300 and len(sizes) < len(values)  # batches, not one each
    with pytest.raises(ValueError, match="^recv_many: limit must be at least 1, got 0$"):
        await rx.recv_many(limit=0)


async def test_a_bad_payload_inside_a_run_fails_only_its_own_message(linked):
    """Messages read in one run are decoded together; one bad payload fails
    exactly its own recv(), in order, and its neighbours still arrive."""
    tx, conn = linked
    await tx.send(b"before")  # networked and open: its raw path is set up
    channel = tx._channel  # the runtime's own send path, to put a payload no encoder would write
    channel.link.send(channel.chanid, [b"\xff\xff"], (), ())  # (0xff: a CBOR "break" out of place)
    await tx.send(b"after")
    await tx.finish()
    rx = conn.entrypoint
    assert await asyncio.wait_for(rx.recv(), TIMEOUT) == b"before"
    with pytest.raises(aqueduct.PayloadError, match="not valid CBOR"):
        await asyncio.wait_for(rx.recv(), TIMEOUT)
    assert await collect(rx) == [b"after"]


async def test_recv_many_gives_the_values_before_a_bad_payload_then_its_error(linked):
    tx, conn = linked
    await tx.send(b"before")
    channel = tx._channel  # as above: a payload no encoder would write
    channel.link.send(channel.chanid, [b"\xff\xff"], (), ())
    await tx.send(b"after")
    await tx.finish()
    rx = conn.entrypoint
    assert await asyncio.wait_for(rx.recv_many(), TIMEOUT) == [b"before"]
    with pytest.raises(aqueduct.PayloadError, match="not valid CBOR"):
        await asyncio.wait_for(rx.recv_many(), TIMEOUT)
    assert await asyncio.wait_for(rx.recv_many(), TIMEOUT) == [b"after"]
    with pytest.raises(aqueduct.Finished):
        await asyncio.wait_for(rx.recv_many(), TIMEOUT)


async def test_cancel_surfaces_cancelled_on_the_receiver(linked):
    tx, conn = linked
    await tx.send("before cancel")
    tx.cancel()
    received = []
    with pytest.raises(aqueduct.Cancelled):
        async with asyncio.timeout(TIMEOUT):
            async for value in conn.entrypoint:
                received.append(value)
    assert received in ([], ["before cancel"])


async def test_receiver_close_surfaces_receiver_closed_on_the_sender(linked):
    tx, conn = linked
    await tx.send("hello")
    assert await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT) == "hello"
    await conn.entrypoint.close()
    with pytest.raises(aqueduct.ReceiverClosed):
        async with asyncio.timeout(TIMEOUT):
            for _ in range(10_000):
                await tx.send("more")
                await asyncio.sleep(0.01)


@pytest.mark.parametrize("end", ["finish", "cancel", "receiver close", "connection close"])
async def test_raw_bytes_sends_fail_like_any_send_once_the_channel_ended(linked, end):
    """``bytes`` sends take a shorter path once a send left room; it must end like any send."""
    tx, conn = linked
    for i in range(3):  # the first send takes the general path, the others the short one
        await tx.send(b"%d" % i)
    assert [await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT) for _ in range(3)] == [b"0", b"1", b"2"]
    expected: tuple[type[Exception], str | None] = (aqueduct.LocalProtocolError, f"after {end}")
    if end == "finish":
        await asyncio.wait_for(tx.finish(), TIMEOUT)
    elif end == "cancel":
        tx.cancel()
    elif end == "receiver close":
        await conn.entrypoint.close()
        expected = (aqueduct.ReceiverClosed, None)
    else:
        await tx.connection.close("bye")
        expected = (aqueduct.ConnectionLost, None)
    with pytest.raises(expected[0], match=expected[1]):
        async with asyncio.timeout(TIMEOUT):
            for _ in range(10_000):  # a receiver's close takes a round trip to arrive
                await tx.send(b"more")
                await asyncio.sleep(0.01)


async def test_connection_close_surfaces_connection_lost(linked):
    tx, conn = linked
    await tx.send(1)
    assert await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT) == 1
    await tx.connection.close("bye")
    with pytest.raises(aqueduct.ConnectionLost):
        await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT)
    with pytest.raises(aqueduct.ConnectionLost):
        await tx.send(2)


async def test_messages_queued_locally_move_over_with_the_receiver(linked):
    tx, conn = linked
    sub_tx, sub_rx = aqueduct.channel()
    for i in range(3):
        await sub_tx.send(i)  # buffered in the local pair, nobody networked yet
    await tx.send({"sub": sub_rx})
    for i in range(3, 6):
        await sub_tx.send(i)
    await sub_tx.finish()
    msg = await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT)
    assert await collect(msg["sub"]) == list(range(6))


async def test_sender_sent_away_keeps_local_messages_first(linked):
    tx, conn = linked
    back_tx, back_rx = aqueduct.channel()
    await back_tx.send("local")
    await tx.send({"reply": back_tx})
    msg = await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT)
    await msg["reply"].send("remote")
    await msg["reply"].finish()
    assert await collect(back_rx) == ["local", "remote"]


async def test_oneshot_reply(linked):
    tx, conn = linked
    otx, orx = aqueduct.oneshot()
    await tx.send({"question": 6 * 7, "answer_to": otx})
    request = await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT)
    assert isinstance(request["answer_to"], aqueduct.runtime.OneshotSender)
    await request["answer_to"].send(request["question"])
    with pytest.raises(aqueduct.LocalProtocolError, match="single message"):
        await request["answer_to"].send("twice")
    assert await asyncio.wait_for(orx.recv(), TIMEOUT) == 42


async def test_raw_bytes_message_with_explicit_attachments(linked):
    tx, conn = linked
    reply_tx, reply_rx = aqueduct.channel()
    data_tx, data_rx = aqueduct.channel()
    await tx.send(b"\x01hello", attachments=[reply_tx, data_rx])
    await data_tx.send(b"on the attached channel")
    msg = await asyncio.wait_for(conn.entrypoint.recv_message(), TIMEOUT)
    assert msg.value == b"\x01hello"
    remote_reply, remote_data = msg.attachments
    assert isinstance(remote_reply, aqueduct.Sender) and isinstance(remote_data, aqueduct.Receiver)
    assert await asyncio.wait_for(remote_data.recv(), TIMEOUT) == b"on the attached channel"
    await remote_reply.send({"ok": True})
    assert await asyncio.wait_for(reply_rx.recv(), TIMEOUT) == {"ok": True}


async def test_explicit_attachments_and_handles_in_the_value_share_indices(linked):
    tx, conn = linked
    a_tx, _a_rx = aqueduct.channel()
    b_tx, _b_rx = aqueduct.channel()
    await tx.send({"b": b_tx, "a_again": a_tx}, attachments=[a_tx])
    msg = await asyncio.wait_for(conn.entrypoint.recv_message(), TIMEOUT)
    first, second = msg.attachments
    assert msg.value == {"b": second, "a_again": first}


async def test_dropping_received_handles_releases_their_channels(linked):
    tx, conn = linked
    back_tx, back_rx = aqueduct.channel()
    out_tx, out_rx = aqueduct.channel()
    await tx.send({"sender": back_tx, "receiver": out_rx})
    msg = await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT)
    del msg  # the server application drops both handles without using them
    gc.collect()
    with pytest.raises(aqueduct.Cancelled):  # a dropped Sender cancels
        await asyncio.wait_for(back_rx.recv(), TIMEOUT)
    with pytest.raises(aqueduct.ReceiverClosed):  # a dropped Receiver closes
        async with asyncio.timeout(TIMEOUT):
            for _ in range(10_000):
                await out_tx.send("anyone?")
                await asyncio.sleep(0.01)


async def test_unreliable_messages_too_big_for_a_datagram_still_arrive(linked):
    tx, conn = linked
    tx.unreliable()
    sizes = [*range(950, 1250, 7), 5000, 20_000]
    collector = asyncio.create_task(collect(conn.entrypoint))
    for size in sizes:
        await tx.send(bytes([size % 256]) * size)
    await tx.finish()
    got = sorted(len(value) for value in await collector)
    assert len(got) == len(set(got))  # at most once
    assert [s for s in sizes if s >= 1250] == [s for s in got if s >= 1250]  # these went on streams
    assert tx.connection.stats()["fallback_streams"] >= 2
