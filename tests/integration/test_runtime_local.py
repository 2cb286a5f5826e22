"""In-process channel pairs: the API behaves the same before any connection exists."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aqueduct
from aqueduct.runtime import Finished
from tests.waiting import count_calls, wait_until

TIMEOUT = 10


async def test_local_pair_delivers_in_order_then_finishes():
    tx, rx = aqueduct.channel()

    async def produce():
        for i in range(500):
            await tx.send({"n": i}, headers={"k": "v"})
        await tx.finish()

    producer = asyncio.create_task(produce())
    got = [msg["n"] async for msg in rx]
    await asyncio.wait_for(producer, TIMEOUT)
    assert got == list(range(500))
    with pytest.raises(Finished):
        await rx.recv()


async def test_send_waits_when_local_buffer_is_full():
    tx, rx = aqueduct.channel(capacity=2)
    await tx.send(1)
    await tx.send(2)
    offers = count_calls(tx._channel, "offer")  # the local pair's pipe
    third = asyncio.create_task(tx.send(3))
    # The third send offered its message to the full pipe (its one chance to pass the bound) ...
    await wait_until(lambda: offers() >= 1, "the third send's offer", TIMEOUT)
    assert not third.done()  # ... and waits for the receiver: bounded
    assert await rx.recv() == 1
    await asyncio.wait_for(third, TIMEOUT)
    assert [await rx.recv(), await rx.recv()] == [2, 3]


async def test_headers_and_raw_bytes_reach_the_receiver():
    tx, rx = aqueduct.channel()
    await tx.send(b"\x00raw", headers={"trace": "abc"})
    msg = await rx.recv_message()
    assert msg.value == b"\x00raw"
    assert msg.headers == (("trace", b"abc"),)


async def test_cancel_surfaces_cancelled_and_drops_buffered():
    tx, rx = aqueduct.channel()
    await tx.send("dropped")
    tx.cancel()
    with pytest.raises(aqueduct.Cancelled):
        await rx.recv()


async def test_receiver_close_makes_send_fail_with_receiver_closed():
    tx, rx = aqueduct.channel(capacity=1)
    await tx.send(1)
    blocked = asyncio.create_task(tx.send(2))
    await asyncio.sleep(0)
    await rx.close()
    with pytest.raises(aqueduct.ReceiverClosed):
        await asyncio.wait_for(blocked, TIMEOUT)
    with pytest.raises(aqueduct.ReceiverClosed):
        await tx.send(3)


async def test_send_after_finish_is_a_local_protocol_error():
    tx, _rx = aqueduct.channel()
    await tx.finish()
    with pytest.raises(aqueduct.LocalProtocolError, match="after finish"):
        await tx.send(1)


async def test_mode_must_be_chosen_before_first_send():
    tx, _rx = aqueduct.channel()
    assert tx.unordered() is tx and tx.mode is aqueduct.Mode.UNORDERED
    await tx.send(1)
    with pytest.raises(aqueduct.LocalProtocolError, match="before the first send"):
        tx.unreliable()


async def test_oneshot_carries_one_message():
    otx, orx = aqueduct.oneshot()
    await otx.send("only")
    with pytest.raises(aqueduct.LocalProtocolError, match="single message"):
        await otx.send("again")
    assert await orx.recv() == "only"
    assert [m async for m in orx] == []


async def test_handles_travel_through_local_channels_by_reference():
    tx, rx = aqueduct.channel()
    inner_tx, inner_rx = aqueduct.channel()
    await tx.send({"reply": inner_tx})
    msg = await rx.recv()
    assert msg["reply"] is inner_tx
    await msg["reply"].send("pong")
    assert await inner_rx.recv() == "pong"


OPS = st.lists(st.sampled_from(["send", "recv", "finish", "cancel", "close"]), max_size=30)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, capacity=st.integers(min_value=1, max_value=3))
def test_local_pair_matches_its_model(ops, capacity):
    """Any sequence of calls on a local pair behaves like a simple queue model."""
    asyncio.run(_run_against_model(ops, capacity))


async def _run_against_model(ops, capacity):
    tx, rx = aqueduct.channel(capacity=capacity)
    queue: list[int] = []
    finished = cancelled = closed = False
    counter = 0
    for op in ops:
        if op == "send":
            if closed:
                with pytest.raises(aqueduct.ReceiverClosed):
                    await tx.send(counter)
            elif finished or cancelled:
                with pytest.raises(aqueduct.LocalProtocolError):
                    await tx.send(counter)
            elif len(queue) < capacity:  # a full buffer would wait: not a single-task step
                await tx.send(counter)
                queue.append(counter)
            counter += 1
        elif op == "recv":
            if closed:
                with pytest.raises(aqueduct.LocalProtocolError):
                    await rx.recv()
            elif queue:
                assert await rx.recv() == queue.pop(0)
            elif cancelled:
                with pytest.raises(aqueduct.Cancelled):
                    await rx.recv()
            elif finished:
                with pytest.raises(Finished):
                    await rx.recv()
        elif op == "finish":
            if closed:
                with pytest.raises(aqueduct.ReceiverClosed):
                    await tx.finish()
            elif finished or cancelled:
                with pytest.raises(aqueduct.LocalProtocolError):
                    await tx.finish()
            else:
                await tx.finish()
                finished = True
        elif op == "cancel":
            tx.cancel()
            if not (closed or finished or cancelled):
                cancelled, queue = True, []
        elif op == "close":
            await rx.close()
            if not closed:
                closed, queue = True, []


async def test_local_explicit_attachments_are_listed_on_the_message():
    tx, rx = aqueduct.channel()
    inner_tx, _ = aqueduct.channel()
    await tx.send(b"raw", attachments=[inner_tx])
    msg = await rx.recv_message()
    assert msg.attachments == (inner_tx,)
    with pytest.raises(TypeError, match="Senders or Receivers"):
        await tx.send(b"raw", attachments=["not a handle"])
