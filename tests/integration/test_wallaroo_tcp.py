"""The Wallaroo v3 listener over real TCP, with the bridge's ingest and a real on-disk log.

Spark is not involved: "Spark committed" is :meth:`Ingest.on_committed`,
the entry point the bridge's commit listener calls (Spark end to end is
tests/spark/test_bridge_wallaroo.py). The connector is the spec-page client
of tests/wallaroo_client.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from aqueduct.bridge.ingest.service import Ingest
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.wallaroo.frames import (
    NO_POINT,
    NotifyAck,
    WallarooAck,
    WallarooError,
    WallarooFrameSplitter,
    WallarooHello,
    WallarooNotify,
    WallarooOk,
    encode,
)
from aqueduct.connector.wallaroo.worker_session import WallarooSession
from aqueduct.connector.worker.server import WorkerServer
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig
from tests.stored import stored
from tests.waiting import wait_until
from tests.wallaroo_client import WallarooSource, payload, stream_id_of

TIMEOUT = 30.0  # only there to turn a hang into a failure


@dataclass
class Worker:
    log: DurableLog
    ingest: Ingest
    server: WorkerServer

    def stored(self, stream_id: int) -> list[tuple[int, bytes]]:
        """(message id, payload) of a stream's durable data records, in log order."""
        return stored(self.log, stream_id)


@contextlib.asynccontextmanager
async def wallaroo_worker(path: Path, credits: int = 32) -> AsyncIterator[Worker]:
    """A v3 listener feeding an ingest; every complete epoch is "committed by Spark" as it becomes durable."""
    log = DurableLog(path)
    ingest = Ingest(log)
    server = await serve_tcp(
        "127.0.0.1", 0, ingest, WorkerConfig(initial_credits=credits), WallarooSession
    )

    async def spark_stand_in() -> None:
        while True:
            await asyncio.sleep(0.05)
            ingest.on_committed({s: log.complete_offset(s) for s in log.stream_ids()})

    tasks = [asyncio.create_task(ingest.run()), asyncio.create_task(spark_stand_in())]
    try:
        yield Worker(log, ingest, server)
    finally:
        await server.close()
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        log.close()


def expected(stream_id: int, count: int) -> list[tuple[int, bytes]]:
    return [(i, payload(stream_id, i)) for i in range(count)]


async def test_a_restarted_connector_resumes_after_notify_acks_point_exactly_once(tmp_path: Path) -> None:
    streams, count = {1: "temps/a", 2: "temps/b"}, 400
    async with wallaroo_worker(tmp_path / "log") as worker:
        source = WallarooSource(worker.server.port, streams, count, timeout=TIMEOUT)
        client = asyncio.create_task(source.run())
        await wait_until(
            lambda: all(worker.log.durable_end(s) > 100 for s in streams if s in worker.log.stream_ids())
            and len(worker.log.stream_ids()) == 2,
            "a first part durable",
            TIMEOUT,
        )
        (peer,) = worker.server.peers
        await peer.restart()
        stats = await asyncio.wait_for(client, TIMEOUT)
        for sid in streams:
            assert worker.stored(sid) == expected(sid, count)
    assert stats.restarts == 1 and stats.connections == 2
    first, second = stats.resumed_from
    assert first == {1: NO_POINT, 2: NO_POINT}
    assert all(100 <= second[s] < count for s in streams)  # the durable point, inclusive
    assert source.acked == {1: count - 1, 2: count - 1}


async def test_stream_ids_above_2_63_from_the_released_clients_id_function_stream_and_are_acked(
    tmp_path: Path,
) -> None:
    """Wallaroo's client names streams by 64 bits of SHA-256: half the ids are >= 2^63.

    Each is accepted, acked with the producer's own id, and stored under
    the two's complement mapping to Spark's signed long.
    """
    names = [f"sensor-{i}" for i in range(40)]
    high = [n for n in names if stream_id_of(n) >= 2**63][:2]
    low = [n for n in names if stream_id_of(n) < 2**63][:1]
    streams = {stream_id_of(n): n for n in high + low}
    count = 50
    async with wallaroo_worker(tmp_path / "log") as worker:
        source = WallarooSource(worker.server.port, streams, count, timeout=TIMEOUT)
        stats = await asyncio.wait_for(source.run(), TIMEOUT)
        for sid in streams:
            assert worker.stored(sid) == expected(sid, count)
            view = worker.log.snapshot(sid)
            columns = {v for b in view.read(view.earliest, view.end) for v in b.column("stream_id").to_pylist()}
            assert columns == {sid - 2**64 if sid >= 2**63 else sid}
    assert source.acked == dict.fromkeys(streams, count - 1)  # acks named the producer's own ids
    assert stats.connections == 1 and stats.older_acks == 0


async def raw(port: int, data: bytes) -> list:
    """Send raw bytes, read until the worker closes; return the frames it sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return WallarooFrameSplitter().feed(await asyncio.wait_for(reader.read(), TIMEOUT))
    finally:
        writer.close()


async def exchange(port: int, data: bytes, answers: int) -> list:
    """Send raw bytes, read until the worker sent ``answers`` NOTIFY_ACKs (the connection stays open)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    splitter, frames = WallarooFrameSplitter(), []
    try:
        writer.write(data)
        while sum(isinstance(f, NotifyAck) for f in frames) < answers:
            chunk = await asyncio.wait_for(reader.read(65536), TIMEOUT)
            assert chunk, f"the worker closed after {frames}"
            frames += splitter.feed(chunk)
        return frames
    finally:
        writer.close()


HELLO = encode(WallarooHello("0.0.1", b"", "raw", "r"))
BAD = [
    (encode(WallarooHello("3.0", b"", "raw", "r")), "unsupported protocol version: got 3.0, expected 0.0.1"),
    (HELLO + bytes([0, 0, 0, 1, 42]), "unknown frame tag 42"),
    (
        HELLO + bytes([0, 0, 0, 1, 201]),
        "frame tag 201 is a two-phase-commit frame, not part of a source connection",
    ),
    (
        HELLO + encode(WallarooNotify(1, "x", NO_POINT))[:-1].replace(b"\x00\x00\x00\x14", b"\x00\x00\x00\x13", 1),
        "NOTIFY: body ends inside point of reference (needs 8 bytes, 7 left)",
    ),
    (HELLO + (1 << 30).to_bytes(4, "big"), "frame too large: 1073741824 > 4194304"),
]


async def test_bad_input_gets_its_error_and_leaves_other_sessions_and_acked_data_intact(
    tmp_path: Path,
) -> None:
    streams, count = {7: "good"}, 300
    async with wallaroo_worker(tmp_path / "log", credits=16) as worker:
        good = WallarooSource(worker.server.port, streams, count, timeout=TIMEOUT)
        client = asyncio.create_task(good.run())
        await wait_until(lambda: good.acked[7] != NO_POINT, "a first ACK", TIMEOUT)
        for data, reason in BAD:
            frames = await raw(worker.server.port, data)
            assert frames[-1] == WallarooError(reason)
        # Another connector's stream: refused alone with NOTIFY_ACK success 0 (v3's per-stream
        # refusal); the connection goes on with its other streams, nothing reaches stream 7.
        frames = await exchange(
            worker.server.port, HELLO + encode(WallarooNotify(7, "good", NO_POINT)) + encode(WallarooNotify(8, "mine", NO_POINT)), 2
        )
        assert frames[0] == WallarooOk(16)
        assert [f for f in frames if isinstance(f, NotifyAck)] == [NotifyAck(False, 7, NO_POINT), NotifyAck(True, 8, NO_POINT)]
        assert sum(f.credits for f in frames if isinstance(f, WallarooAck)) == 2  # both NOTIFYs' credits back
        assert not any(isinstance(f, WallarooError) for f in frames)
        stats = await asyncio.wait_for(client, TIMEOUT)
        assert stats.connections == 1  # never disturbed
        assert worker.stored(7) == expected(7, count)
