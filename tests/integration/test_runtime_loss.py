"""Loss, lost-in-transit and back-pressure over real loopback QUIC.

Datagram loss comes from the interop harness's seeded in-process UDP proxy
(``interop.proxy.LossyProxy``) between a real ``aqueduct.connect`` client and
a real ``aqueduct.serve`` server; nothing inside aioquic is patched. QUIC
retransmits stream data, so only UNRELIABLE messages (QUIC datagrams) can be
lost for good, which is exactly what Aqueduct's ack/nack rules must account
for. What a user relies on, and these tests check:

* an unreliable message is delivered at most once, and every number sent is
  eventually acked or nacked (the sender's counters add up);
* a channel whose carrying message never reached the peer's application is
  lost in transit: its handles fail with ``LostInTransit`` wherever they
  are, transitively, and neither side's protocol core keeps any state for it;
* a sender facing a slow receiver is held back (``send()`` waits), so its
  memory stays bounded; an unreliable sender drops its oldest queued message
  instead; both show in ``stats()``;
* oneshot channels refuse misuse with a clear ``LocalProtocolError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import psutil
import pytest

import aqueduct
from aqueduct.proto.config import ProtoConfig
from interop.network import LinkConfig, NetworkConfig
from interop.proxy import LossyProxy
from tests.waiting import wait_until

TIMEOUT = 20.0  # only turns a hang into a failure
# Every third client->server UDP packet from the 12th on is dropped: the
# handshake gets through, then the loss is heavy and reproducible.
EVERY_THIRD = NetworkConfig(
    client_to_server=LinkConfig(drop_indices=frozenset(range(12, 3000, 3))), seed=11
)
# Some client packets are held back 0.6 s, far past the receipt deadline
# (max(2 x RTT, 100 ms)): their datagrams arrive after their number was nacked.
LATE = NetworkConfig(
    client_to_server=LinkConfig(reorder_rate=0.1, reorder_gap=10_000, reorder_max_hold=0.6),
    seed=5,
)
# Messages are held back long enough that the tests decide, not the ack timer,
# whether a message was acked before its channel ended.
SLOW_ACKS = {"ack_delay": 2.0}


bounded = functools.partial(wait_until, timeout=TIMEOUT)


async def outcome(rx: aqueduct.Receiver) -> tuple[list[Any], type[BaseException]]:
    """Everything ``rx`` yields, and how it ended (``Finished`` or the failure's type)."""
    values: list[Any] = []
    for _ in range(10_000):
        try:
            values.append(await asyncio.wait_for(rx.recv(), TIMEOUT))
        except (aqueduct.Finished, aqueduct.AqueductError) as end:
            return values, type(end)
    pytest.fail("the receiver never ended")


async def failure(tx: aqueduct.Sender) -> type[BaseException]:
    """Keep sending on ``tx`` until the channel's failure surfaces; return its type.

    A Sender learns an outcome (a nack, a CLOSE_RECEIVER) only when the peer's
    frame arrives, so the first sends may still succeed.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while loop.time() < deadline:
        try:
            await asyncio.wait_for(tx.send("probe"), TIMEOUT)
        except aqueduct.AqueductError as end:
            return type(end)
        await asyncio.sleep(0.02)
    pytest.fail("the sender never failed")


def leftovers(*conns: aqueduct.Connection) -> list[tuple[list[int], int]]:
    """Per connection: chanids its protocol core holds state for, channels it still tracks."""
    return [(sorted(conn.core.channels), conn.core.tracking_count()) for conn in conns]


NOTHING_LEFT = [([], 0), ([], 0)]


@contextlib.asynccontextmanager
async def linked(
    certs: Any,
    network: NetworkConfig | None = None,
    server: dict[str, Any] | None = None,
    client: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[aqueduct.Sender, aqueduct.ServerConnection, LossyProxy | None]]:
    """A server and one client, through a lossy proxy when ``network`` is given."""
    srv = await aqueduct.serve(
        "127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key, **(server or {})
    )
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(srv.close)
        proxy = None
        address = ("127.0.0.1", srv.port)
        if network is not None:
            proxy = LossyProxy(("127.0.0.1", 0), address, network)
            await stack.enter_async_context(proxy)
            address = proxy.address
        tx = await aqueduct.connect(*address, cafile=certs.ca, timeout=TIMEOUT, **(client or {}))
        stack.push_async_callback(tx.connection.close)
        conn = await asyncio.wait_for(srv.accept(), TIMEOUT)
        yield tx, conn, proxy


async def finish_and_check_clean(tx: aqueduct.Sender, conn: aqueduct.ServerConnection) -> None:
    """Finish the entrypoint; then neither core may hold any channel state."""
    await asyncio.wait_for(tx.finish(), TIMEOUT)
    _, end = await outcome(conn.entrypoint)
    assert end is aqueduct.Finished
    await bounded(lambda: leftovers(tx.connection, conn) == NOTHING_LEFT, "empty channel tables")


# ---------------------------------------------------------------- (a) unreliable accounting


@pytest.mark.parametrize("network", [EVERY_THIRD, LATE], ids=["dropped", "late"])
async def test_unreliable_messages_arrive_at_most_once_and_are_all_accounted(certs, network):
    count = 200
    async with linked(certs, network) as (tx, conn, proxy):
        tx.unreliable()
        reader = asyncio.create_task(outcome(conn.entrypoint))
        for i in range(count):
            await tx.send({"i": i, "pad": b"p" * 400})
        if network is LATE:  # keep the channel open until a late datagram met its nack
            await bounded(lambda: conn.stats()["late_dropped"] >= 1, "a datagram after its nack")
        await asyncio.wait_for(tx.finish(), TIMEOUT)  # returns once every number was covered
        received, end = await asyncio.wait_for(reader, TIMEOUT)
        assert end is aqueduct.Finished
        got = [m["i"] for m in received]
        assert len(got) == len(set(got)), "an unreliable message was delivered twice"
        assert set(got) <= set(range(count))

        sent = tx.connection.stats()
        assert sent["messages_sent"] == count
        assert sent["acked"] + sent["nacked"] == count  # every number acked or nacked
        assert sent["acked"] == len(got)  # acked = delivered, nothing else
        assert sent["nacked"] >= 1  # the network did lose (or delay) some datagrams
        seen = conn.stats()
        assert (seen["acks_sent"], seen["nacks_sent"]) == (sent["acked"], sent["nacked"])
        await bounded(lambda: leftovers(tx.connection, conn) == NOTHING_LEFT, "empty tables")


async def test_unreliable_burst_on_a_clean_link_is_not_nacked_wholesale(certs):
    # Regression: SENT_UNRELIABLE used to leave in the first packet while the
    # burst's datagrams still sat in aioquic's queue (released as congestion
    # control allows), so the receiver's deadline expired first and it nacked
    # most of a burst that no network had lost (~85 % of 1000 here).
    count = 1000
    async with linked(certs) as (tx, conn, _):
        tx.unreliable()
        reader = asyncio.create_task(outcome(conn.entrypoint))
        for i in range(count):
            await tx.send({"i": i, "pad": b"b" * 400})
        await asyncio.wait_for(tx.finish(), TIMEOUT)
        received, end = await asyncio.wait_for(reader, TIMEOUT)
        assert end is aqueduct.Finished
        sent = tx.connection.stats()
        assert sent["acked"] + sent["nacked"] == count and sent["acked"] == len(received)
        # loopback may still drop a few datagrams under load; never most of them
        assert len(received) >= 0.9 * count, f"only {len(received)} of {count} delivered"


# ---------------------------------------------------------------- (b) lost in transit


async def test_handles_in_dropped_datagrams_are_lost_in_transit(certs):
    async with linked(certs, EVERY_THIRD) as (tx, conn, _):
        tx.unreliable()

        async def serve_replies() -> int:
            served = 0
            async for msg in conn.entrypoint:
                await msg["reply"].send(msg["i"])
                await msg["reply"].finish()
                served += 1
            return served

        server = asyncio.create_task(serve_replies())
        kept = []
        for i in range(24):
            reply_tx, reply_rx = aqueduct.channel()
            await tx.send({"i": i, "reply": reply_tx, "pad": b"p" * 700})  # one per packet
            kept.append(reply_rx)
        results = await asyncio.wait_for(asyncio.gather(*(outcome(rx) for rx in kept)), TIMEOUT)
        await asyncio.wait_for(tx.finish(), TIMEOUT)
        served = await asyncio.wait_for(server, TIMEOUT)

        delivered = [i for i, (values, end) in enumerate(results) if end is aqueduct.Finished]
        lost = [i for i, (values, end) in enumerate(results) if end is aqueduct.LostInTransit]
        assert len(delivered) + len(lost) == 24  # nothing else (no hang, no other error)
        assert delivered and lost, "the loss pattern should both deliver and drop"
        assert all(results[i][0] == [i] for i in delivered)
        assert all(results[i][0] == [] for i in lost)
        assert served == len(delivered)
        assert tx.connection.stats()["channels_lost"] == len(lost)
        await bounded(lambda: leftovers(tx.connection, conn) == NOTHING_LEFT, "empty tables")


async def test_handles_in_messages_dropped_by_a_closing_receiver_are_lost_both_ways(certs):
    async with linked(certs, server=SLOW_ACKS, client=SLOW_ACKS) as (tx, conn, _):
        # client -> server: a sub-channel the server receives, then closes unread
        sub_tx, sub_rx = aqueduct.channel()
        back_tx, back_rx = aqueduct.channel()
        await tx.send({"sub": sub_rx, "back": back_tx})
        first = await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT)
        server_sub, server_back = first["sub"], first["back"]

        client_sent_tx, client_kept_rx = aqueduct.channel()
        await sub_tx.send({"tx": client_sent_tx})
        server_sent_tx, server_kept_rx = aqueduct.channel()
        await server_back.send({"tx": server_sent_tx})
        await bounded(
            lambda: server_sub.stats()["messages_received"] == 1
            and back_rx.stats()["messages_received"] == 1,
            "both messages at their receivers",
        )
        await server_sub.close()  # before dequeuing: the message is dropped and nacked
        await back_rx.close()

        assert await outcome(client_kept_rx) == ([], aqueduct.LostInTransit)
        assert await outcome(server_kept_rx) == ([], aqueduct.LostInTransit)
        assert await failure(sub_tx) is aqueduct.ReceiverClosed
        assert await failure(server_back) is aqueduct.ReceiverClosed
        assert tx.connection.stats()["channels_lost"] == 1
        assert conn.stats()["channels_lost"] == 1
        await finish_and_check_clean(tx, conn)


async def test_handles_in_datagrams_a_receiver_closes_unread_are_lost_not_cancelled(certs):
    """Unread unreliable carriers are nacked by the close: their channels are lost for the sender.

    The close may wait for SENT_UNRELIABLE (a datagram read before its
    announcement must be acked, not nacked); the runtime must not cancel
    the channels of the dropped messages meanwhile, or the sender sees
    Cancelled instead of LostInTransit (interop lost-in-transit, reorder).
    """
    # The client announces its datagrams late, and the server's close waits for that.
    held = ({**SLOW_ACKS, "min_receipt_deadline": 3.0}, {"announce_delay": 0.5})
    async with linked(certs, server=held[0], client=held[1]) as (tx, conn, _):
        data_tx, data_rx = aqueduct.channel()
        await tx.send({"data": data_rx})
        server_rx = (await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT))["data"]
        data_tx.unreliable()
        backs = []
        for i in range(10):
            back_tx, back_rx = aqueduct.channel()
            await data_tx.send({"i": i, "back": back_tx})
            backs.append(back_rx)
        await bounded(lambda: server_rx.stats()["messages_received"] == 10, "all ten at the receiver")
        first = await asyncio.wait_for(server_rx.recv(), TIMEOUT)
        await first["back"].send("read")
        await first["back"].finish()
        await server_rx.close()  # nine unread: nacked, their channels lost
        results = await asyncio.wait_for(asyncio.gather(*(outcome(rx) for rx in backs)), TIMEOUT)
        assert results[first["i"]] == (["read"], aqueduct.Finished)
        assert [end for i, (_, end) in enumerate(results) if i != first["i"]] == [aqueduct.LostInTransit] * 9
        del first
        await finish_and_check_clean(tx, conn)


async def test_handle_in_a_message_on_a_cancelled_channel_is_lost(certs):
    async with linked(certs, server=SLOW_ACKS, client=SLOW_ACKS) as (tx, conn, _):
        sub_tx, sub_rx = aqueduct.channel()
        await tx.send({"sub": sub_rx})
        server_sub = (await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT))["sub"]
        sent_tx, kept_rx = aqueduct.channel()
        await sub_tx.send({"tx": sent_tx})
        await bounded(lambda: server_sub.stats()["messages_received"] == 1, "the message")
        sub_tx.cancel()
        # the server's application reads only after the cancel arrived (it would
        # otherwise dequeue the message first, and the handle would be delivered)
        await bounded(lambda: conn.core.channel_count() == 1, "the cancel at the server")

        assert await outcome(server_sub) == ([], aqueduct.Cancelled)  # the message was dropped
        assert await outcome(kept_rx) == ([], aqueduct.LostInTransit)
        assert tx.connection.stats()["channels_lost"] == 1
        await finish_and_check_clean(tx, conn)


async def test_three_level_cascade_is_lost_transitively(certs):
    async with linked(certs, server=SLOW_ACKS, client=SLOW_ACKS) as (tx, conn, _):
        l1_tx, l1_rx = aqueduct.channel()
        await tx.send({"l1": l1_rx})
        server_l1 = (await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT))["l1"]
        l2_tx, l2_rx = aqueduct.channel()
        await l1_tx.send({"l2": l2_rx})  # level 2 rides on level 1
        l3_tx, l3_rx = aqueduct.channel()
        await l2_tx.send({"l3": l3_tx})  # level 3 rides on level 2; the client keeps its Receiver
        # entrypoint, l1, l2 and l3 all have state on the server now
        await bounded(lambda: conn.core.channel_count() == 4, "level 2 and 3 state on the server")

        await server_l1.close()  # the level-2 message was never dequeued: nacked

        assert await outcome(l3_rx) == ([], aqueduct.LostInTransit)
        assert await failure(l2_tx) is aqueduct.LostInTransit
        assert await failure(l1_tx) is aqueduct.ReceiverClosed
        assert tx.connection.stats()["channels_lost"] == 2
        await finish_and_check_clean(tx, conn)


# ---------------------------------------------------------------- (c) back-pressure

SENDER = r"""
import asyncio, sys
import psutil
import aqueduct

async def main(port, cafile, total, size):
    tx = await aqueduct.connect("127.0.0.1", port, cafile=cafile, timeout=20)
    print("ready", psutil.Process().memory_info().rss, flush=True)
    for i in range(total // size):
        await tx.send(bytes(size))  # a fresh 16 KiB buffer each time, never kept
        if i % 64 == 0:
            print("sent", i + 1, flush=True)
    await tx.finish()
    print("done", flush=True)

asyncio.run(main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
"""
OFFERED = 200 * 1024 * 1024
MESSAGE = 16 * 1024
MIB = 1024 * 1024
MAX_QUEUED = ProtoConfig().max_queued
WINDOW = ProtoConfig().window


async def test_sender_memory_stays_bounded_facing_a_slow_receiver(certs):
    """A separate process offers 200 MB; the receiver reads slowly; the sender's RSS stays flat.

    The sender may hold one window (1 MiB) in flight plus ``max_queued``
    (1024) messages in its local queue, 17 MiB here, before ``send()`` waits.
    The run stops after a bounded time: the machine's speed decides how much
    of the 200 MB went through, which is not what is tested; that the
    sender's backlog and RSS stay bounded while it tries is.
    """
    server = await aqueduct.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SENDER, str(server.port), str(certs.ca), str(OFFERED), str(MESSAGE),
        stdout=asyncio.subprocess.PIPE, env=env,
    )
    try:
        conn = await asyncio.wait_for(server.accept(), TIMEOUT)
        line = (await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)).split()
        assert line[0] == b"ready"
        baseline = int(line[1])
        handed_off = 0

        async def watch_progress() -> None:
            nonlocal handed_off
            while line := await proc.stdout.readline():
                if line.startswith(b"sent"):
                    handed_off = int(line.split()[1])

        progress = asyncio.create_task(watch_progress())
        sender = psutil.Process(proc.pid)
        peak = baseline
        received = 0
        loop = asyncio.get_running_loop()
        stop = loop.time() + 5.0
        while loop.time() < stop:  # read slowly: one message per 2 ms at most
            received += len(await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT))
            await asyncio.sleep(0.002)
            peak = max(peak, sender.memory_info().rss)
        assert received > 0
        # held back: what send() accepted is what was read, plus one window and one full queue
        backlog = handed_off - received // MESSAGE
        assert backlog <= MAX_QUEUED + WINDOW // MESSAGE + 64, backlog  # (+64: progress granularity)
        assert peak - baseline < 64 * MIB, f"sender grew by {(peak - baseline) / MIB:.0f} MiB"
        progress.cancel()
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        await server.close()


async def test_bounded_sender_waits_when_its_queue_is_full_and_counts_stalls(certs):
    async with linked(certs, server={"window": 2048}, client={"max_queued": 4}) as (tx, conn, _):
        payload = b"r" * 900  # costs ~950 bytes with its MESSAGE head and content-type header
        for _ in range(5):  # two fit the 2 KiB window, three wait in the local queue
            await asyncio.wait_for(tx.send(payload), TIMEOUT)
        blocked = asyncio.create_task(tx.send(payload))  # queued as the 4th: the queue is full
        # Its chance to (wrongly) complete: the server's ACKs of everything in flight, processed
        # (the send's task ran in the loop turns since).
        await wait_until(lambda: tx.connection.stats()["quic"]["bytes_in_flight"] == 0, "every packet acked", TIMEOUT)
        assert not blocked.done(), "send() must wait while the local queue is full"
        assert tx.stats()["window_stalls"] == 4
        for _ in range(6):
            assert await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT) == payload
        await asyncio.wait_for(blocked, TIMEOUT)
        assert tx.connection.stats()["window_stalls"] == 4
        await finish_and_check_clean(tx, conn)


async def test_tasks_sharing_a_blocked_sender_all_get_through(certs):
    # Three producers on one Sender whose queue (2) and window (2 KiB) are tiny:
    # every waiting send() must be woken as room appears, none may hang.
    async with linked(certs, server={"window": 2048}, client={"max_queued": 2}) as (tx, conn, _):

        async def produce(k: int) -> None:
            for i in range(10):
                await tx.send({"k": k, "i": i, "pad": b"c" * 500})

        producers = [asyncio.create_task(produce(k)) for k in range(3)]
        got = [await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT) for _ in range(30)]
        await asyncio.wait_for(asyncio.gather(*producers), TIMEOUT)
        for k in range(3):
            assert [m["i"] for m in got if m["k"] == k] == list(range(10))
        assert tx.stats()["window_stalls"] > 0
        await finish_and_check_clean(tx, conn)


async def test_unreliable_full_queue_evicts_its_oldest_message(certs):
    async with linked(certs, server={"window": 2048}, client={"max_queued": 4}) as (tx, conn, _):
        tx.unreliable()
        for i in range(20):  # never waits: the oldest queued message is dropped instead
            await asyncio.wait_for(tx.send({"i": i, "pad": b"u" * 900}), TIMEOUT)
        stats = tx.stats()
        assert stats["evicted"] == 20 - 2 - 4 and stats["window_stalls"] == 18
        got = []
        for _ in range(6):
            got.append((await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT))["i"])
        assert sorted(got) == [0, 1, 16, 17, 18, 19]  # the first two went out, the newest four waited
        await finish_and_check_clean(tx, conn)


# ---------------------------------------------------------------- oneshot misuse


async def test_oneshot_refuses_a_second_send_and_delivery_modes(certs):
    async with linked(certs) as (tx, conn, _):
        otx, orx = aqueduct.oneshot()
        for choose in (otx.unreliable, otx.unordered):
            with pytest.raises(aqueduct.LocalProtocolError, match="no delivery modes"):
                choose()
        await tx.send({"reply": otx})
        server_otx = (await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT))["reply"]
        assert isinstance(server_otx, aqueduct.OneshotSender)
        await asyncio.wait_for(server_otx.send("the one reply"), TIMEOUT)
        with pytest.raises(aqueduct.LocalProtocolError, match="single message"):
            await server_otx.send("a second reply")
        assert await asyncio.wait_for(orx.recv(), TIMEOUT) == "the one reply"
        with pytest.raises(aqueduct.Finished):
            await asyncio.wait_for(orx.recv(), TIMEOUT)
        await finish_and_check_clean(tx, conn)
