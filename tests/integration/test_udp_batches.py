"""The UDP reader: every waiting datagram per wake-up, one flush per connection after them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable

from aqueduct.runtime.backends.udp import MAX_BATCH, ReadBatch, open_udp
from tests.waiting import wait_until


class Recorder(asyncio.DatagramProtocol):
    """Records what arrived, and each flush with how many datagrams it followed."""

    def __init__(self, batch: ReadBatch) -> None:
        self.batch = batch
        self.received: list[bytes] = []
        self.flushes: list[int] = []
        self.errors: list[OSError] = []

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.received.append(data)
        self.transmit()  # what aioquic's protocol does after every datagram

    def transmit(self) -> None:
        if self.batch.active:
            self.batch.defer(self)
            return
        self.flushes.append(len(self.received))

    def error_received(self, exc: OSError) -> None:
        self.errors.append(exc)


@contextlib.asynccontextmanager
async def recorded_socket() -> AsyncIterator[tuple[Recorder, Callable[[bytes], None]]]:
    """A batched UDP endpoint on loopback with a Recorder, and a way to send it datagrams."""
    batch = ReadBatch()
    transport, proto = await open_udp(lambda: Recorder(batch), ("127.0.0.1", 0), socket.AF_INET, batch)
    port = transport.get_extra_info("sockname")[1]
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        yield proto, lambda data: sender.sendto(data, ("127.0.0.1", port))
    finally:
        sender.close()
        transport.close()


async def test_waiting_datagrams_are_read_together_and_flushed_once():
    async with recorded_socket() as (proto, send):
        for i in range(10):  # all sent before the loop gets a turn to read
            send(b"d%d" % i)
        await wait_until(lambda: len(proto.received) == 10, "10 datagrams", timeout=10)
        assert proto.received == [b"d%d" % i for i in range(10)]
        assert proto.flushes == [10]  # one flush, after the whole batch


async def test_a_batch_is_bounded_so_the_loop_keeps_turning():
    n = MAX_BATCH * 3
    async with recorded_socket() as (proto, send):
        for _ in range(n):
            send(b"x")
        await wait_until(lambda: len(proto.received) == n, f"{n} datagrams", timeout=10)
        assert len(proto.flushes) >= 3 and all(
            b - a <= MAX_BATCH for a, b in zip([0, *proto.flushes], proto.flushes, strict=False)
        )


async def test_closing_the_transport_stops_reading_and_closes_the_socket():
    batch = ReadBatch()
    transport, proto = await open_udp(lambda: Recorder(batch), ("127.0.0.1", 0), socket.AF_INET, batch)
    sock = transport.get_extra_info("socket")
    transport.close()
    # the transport closes our socket, reader and all (on a later turn of the loop)
    await wait_until(lambda: sock.fileno() == -1, "the socket closed", timeout=10)


async def test_a_receive_buffer_is_granted_whole_or_the_operator_is_told_how_to_raise_it(caplog):
    """Root gets the whole queue past ``net.core.rmem_max``; anyone else is warned, with the sysctl to raise."""
    asked = 64 * 1024 * 1024  # beyond any distribution's default rmem_max
    batch = ReadBatch()
    with caplog.at_level(logging.WARNING, logger="aqueduct.runtime.backends.udp"):
        transport, _ = await open_udp(
            lambda: Recorder(batch), ("127.0.0.1", 0), socket.AF_INET, batch, receive_buffer=asked
        )
    try:
        granted = transport.get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        warnings = [r.getMessage() for r in caplog.records]
        if os.geteuid() == 0:  # CAP_NET_ADMIN: SO_RCVBUFFORCE
            assert granted >= asked and warnings == []
        else:
            assert granted < asked
            assert len(warnings) == 1 and f"raise net.core.rmem_max to {asked}" in warnings[0]
    finally:
        transport.close()
