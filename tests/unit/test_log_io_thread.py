"""The log's I/O thread: commits in flight versus truncation, close and cancellation.

A group commit writes and fsyncs on the log's single I/O thread. These tests
hold that thread busy (a job that waits on an event, submitted first) so
that a commit is deterministically in flight while something else happens,
then release it and check that nothing was lost, reordered or half-published.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from aqueduct.bridge.ingest.service import Ingest, IngestConfig
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.bridge.storage.view import load_streams
from aqueduct.connector.frames import (
    PROTOCOL_VERSION,
    Ack,
    ConnectorMessage,
    FrameSplitter,
    Hello,
    Notify,
    encode,
)
from aqueduct.connector.worker.server import WorkerPeer
from aqueduct.connector.worker_session import WorkerConfig
from aqueduct.wire.modes import Mode
from tests.waiting import wait_until

CONNECTOR = "sensors/host-1"
TIMEOUT = 30.0  # only turns a hang into a failure


@contextlib.contextmanager
def io_thread_held(log: DurableLog) -> Iterator[threading.Event]:
    """Keep the log's I/O thread busy until the yielded event is set (or the block ends)."""
    gate = threading.Event()
    log._io.submit(gate.wait, TIMEOUT)
    try:
        yield gate
    finally:
        gate.set()


def stored_ids(path: Path, stream_id: int) -> list[int]:
    """Message ids of a stream's committed records, as a reader in another process sees them."""
    s = load_streams(path)[stream_id]
    return [m for batch in s.read(s.earliest, s.end) for m in batch.column("message_id").to_pylist()]


def test_truncation_requested_during_a_commit_runs_after_it(tmp_path: Path) -> None:
    """The truncation rewrites the index from its entries: the commit's entry must be among them."""
    path = tmp_path / "log"
    with DurableLog(path, segment_bytes=1024) as log:
        log.open_stream(1, "s", CONNECTOR)
        for i in range(20):
            log.append(ConnectorMessage.build(1, b"p" * 100, message_id=i))
            log.commit()
        with io_thread_held(log) as gate:
            log.append(ConnectorMessage.build(1, b"late", message_id=20))
            in_flight = log.start_commit()
            cut = log.truncate(1, 15)  # queued behind the commit; the caller does not wait
            assert not in_flight.done() and not cut.done()
            gate.set()
            earliest = cut.result(TIMEOUT)
        assert in_flight.result(TIMEOUT) == {1: 21}
        assert 0 < earliest <= 15 and log.durable_end(1) == 21
    assert stored_ids(path, 1) == list(range(earliest, 21))
    with DurableLog(path) as log:  # the index on disk holds the commit's entry too
        assert log.durable_end(1) == 21 and log.snapshot(1).earliest == earliest


def test_close_waits_for_a_commit_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "log"
    log = DurableLog(path)
    log.open_stream(1, "s", CONNECTOR)
    for i in range(3):
        log.append(ConnectorMessage.build(1, b"x", message_id=i))
    with ThreadPoolExecutor(1) as caller, io_thread_held(log) as gate:
        in_flight = log.start_commit()
        closing = caller.submit(log.close)
        gate.set()
        closing.result(TIMEOUT)
    assert in_flight.result(TIMEOUT) == {1: 3}
    assert stored_ids(path, 1) == [0, 1, 2]


async def test_a_cancelled_commit_still_publishes_its_group_and_returns_its_credits(
    tmp_path: Path,
) -> None:
    """Cancelling the commit task while the thread writes neither loses nor strands the group."""
    log = DurableLog(tmp_path / "log")
    ingest = Ingest(log)
    sent = bytearray()

    async def send(data: bytes) -> None:
        sent.extend(data)

    peer = WorkerPeer(ingest, WorkerConfig(initial_credits=16), send, lambda: None)
    try:
        frames = [Hello(PROTOCOL_VERSION, b"", "p", "i"), Notify(1, "s", 0)]
        frames += [ConnectorMessage(0, 1, i, payload=b"x") for i in range(5)]
        await peer.receive_payload(b"".join(map(encode, frames)), mode=Mode.ORDERED)
        assert ingest.buffered == 5
        with io_thread_held(log) as gate:
            commit = asyncio.ensure_future(ingest.group_commit())
            await asyncio.sleep(0)  # the task starts the commit and waits for the thread
            commit.cancel()
            for _ in range(3):
                await asyncio.sleep(0)
            assert not commit.done() and log.durable_end(1) == 0  # still waiting for the thread
            gate.set()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(commit, TIMEOUT)
        assert log.durable_end(1) == 5 and ingest.buffered == 0

        def credits_returned() -> bool:
            return Ack(5) in FrameSplitter().feed(bytes(sent))

        await wait_until(credits_returned, "the ACK with the group's 5 credits", TIMEOUT)
    finally:
        await peer.aclose()
        log.close()


async def test_group_commits_start_at_least_group_commit_interval_apart(tmp_path: Path) -> None:
    """A paced producer gets a group commit per interval, not one per record: fewer fsyncs for Spark's disk."""
    log = DurableLog(tmp_path / "log")
    ingest = Ingest(log, IngestConfig(group_commit_interval=0.2))
    loop = asyncio.get_running_loop()
    starts: list[float] = []
    start_commit = log.start_commit

    def counted(now: float | None = None):  # noqa: ANN202 - the log's own signature
        starts.append(loop.time())
        return start_commit(now)

    log.start_commit = counted  # type: ignore[method-assign]

    async def send(data: bytes) -> None:
        pass

    peer = WorkerPeer(ingest, WorkerConfig(initial_credits=64), send, lambda: None)
    runner = asyncio.ensure_future(ingest.run())
    try:
        frames = [Hello(PROTOCOL_VERSION, b"", "p", "i"), Notify(1, "s", 0)]
        await peer.receive_payload(b"".join(map(encode, frames)), mode=Mode.ORDERED)
        for i in range(6):  # one record every 50 ms
            await peer.receive_payload(encode(ConnectorMessage(0, 1, i, payload=b"x")), mode=Mode.ORDERED)
            await asyncio.sleep(0.05)
        await wait_until(lambda: log.durable_end(1) == 6, "all six records durable", TIMEOUT)
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        assert len(starts) < 6 and all(gap >= 0.2 * 0.99 for gap in gaps), gaps
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await peer.aclose()
        log.close()
