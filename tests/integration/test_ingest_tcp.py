"""The ingest service over real TCP connections and a real on-disk log.

Spark is not involved here: where a test needs "Spark committed up to
offset X", it calls :meth:`Ingest.on_committed`, the very entry point the
bridge's commit listener calls. Spark end to end is in tests/spark.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aqueduct.bridge.ingest.service import Ingest, IngestConfig
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector import frames as f
from aqueduct.connector.errors import ConnectorRefused
from aqueduct.connector.producer.client import Connector
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig
from tests.ingest_stop import stop_ingest
from tests.stored import stored
from tests.waiting import wait_until

TIMEOUT = 30.0  # generous: only there to turn a hang into a failure


@dataclass
class Worker:
    """A running ingest service: log, sink, group commit and TCP listener."""

    log: DurableLog
    ingest: Ingest
    port: int

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def stored(self, stream_id: int) -> list[tuple[int, bytes]]:
        """(message id, payload) of the durable data records of a stream, in log order."""
        return stored(self.log, stream_id)

    def durable(self, stream_id: int) -> int:
        """Durable records of a stream (0 before its NOTIFY reached the log)."""
        return self.log.durable_end(stream_id) if stream_id in self.log.stream_ids() else 0

    def commit_all(self) -> None:
        """What the commit listener does once Spark committed every complete epoch."""
        self.ingest.on_committed({s: self.log.complete_offset(s) for s in self.log.stream_ids()})


@contextlib.asynccontextmanager
async def running_worker(
    path: Path, *, credits: int = 256, max_lag: int = 1_000_000
) -> AsyncIterator[Worker]:
    log = DurableLog(path)
    ingest = Ingest(log, IngestConfig(max_lag=max_lag))
    commits = asyncio.create_task(ingest.run())
    server = await serve_tcp("127.0.0.1", 0, ingest, WorkerConfig(initial_credits=credits))
    try:
        yield Worker(log, ingest, server.port)
    finally:
        await stop_ingest(server, commits, log)


async def spark_stand_in(worker: Worker, every: float = 0.05) -> None:
    """Commit every complete epoch periodically, as a Spark query keeping up would."""
    while True:
        await asyncio.sleep(every)
        worker.commit_all()


eventually = functools.partial(wait_until, timeout=TIMEOUT)


async def produce(url: str, instance: str, stream_ids: list[int], n: int, epoch: int) -> None:
    async with Connector(url, program="test", instance=instance) as conn:
        streams = [await conn.stream(sid, f"s{sid}") for sid in stream_ids]
        for i in range(n):
            for s in streams:
                await s.send(b"m%d" % i)
                if (i + 1) % epoch == 0:
                    await s.send(None, boundary=True)
        for s in streams:
            await s.send(None, boundary=True, eos=True)
        await conn.wait_all_acked(TIMEOUT)
        for s in streams:
            assert s.acked == s.next_id  # the ACK covers the final BOUNDARY too


async def test_several_connectors_are_stored_once_in_order_and_acked(tmp_path: Path) -> None:
    async with running_worker(tmp_path / "log") as worker:
        spark = asyncio.create_task(spark_stand_in(worker))
        try:
            await asyncio.wait_for(
                asyncio.gather(
                    produce(worker.url, "a", [1, 2], 300, epoch=50),
                    produce(worker.url, "b", [3], 300, epoch=50),
                    produce(worker.url, "c", [4, 5], 300, epoch=50),
                ),
                TIMEOUT,
            )
        finally:
            spark.cancel()
        for sid in (1, 2, 3, 4, 5):
            # boundaries take ids too: after every 50 messages one id is a BOUNDARY
            assert worker.stored(sid) == [(i + i // 50, b"m%d" % i) for i in range(300)]
        assert worker.ingest.counters.messages == 5 * 300
        assert worker.ingest.buffered == 0


async def _raw_session(port: int, frames: list[f.Frame]) -> tuple[f.Frame, asyncio.StreamWriter]:
    """Speak the wire protocol by hand (what a resending producer does); return the reply to HELLO."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    splitter = f.FrameSplitter()
    replies: list[f.Frame] = []
    writer.write(f.encode(frames[0]))
    while not replies:
        replies += splitter.feed(await asyncio.wait_for(reader.read(65536), TIMEOUT))
    writer.write(b"".join(f.encode(x) for x in frames[1:]))
    await writer.drain()
    return replies[0], writer


def _hello(instance: str) -> f.Hello:
    return f.Hello(f.PROTOCOL_VERSION, b"", "raw", instance)


def _messages(sid: int, ids: range) -> list[f.ConnectorMessage]:
    return [f.ConnectorMessage(0, sid, i, None, None, b"p%d" % i) for i in ids]


async def test_a_reconnecting_producer_resumes_from_ok_and_duplicates_are_dropped(
    tmp_path: Path,
) -> None:
    async with running_worker(tmp_path / "log") as worker:
        first = [_hello("x"), f.Notify(9, "nine", 0), *_messages(9, range(0, 100))]
        reply, writer = await _raw_session(worker.port, first)
        assert reply == f.Ok(256, ())
        await eventually(lambda: worker.durable(9) == 100, "the first 100 to be durable")
        writer.close()

        # The producer did not see an ACK and starts over from 0, sending 150 messages.
        again = [_hello("x"), f.Notify(9, "nine", 0), *_messages(9, range(0, 150))]
        reply, writer = await _raw_session(worker.port, again)
        assert reply == f.Ok(256, (f.StreamRef(9, "nine", 100),))
        await eventually(lambda: worker.durable(9) == 150, "the rest to be durable")
        writer.close()
        assert worker.stored(9) == [(i, b"p%d" % i) for i in range(150)]


async def test_ok_carries_durable_points_after_the_worker_restarts(tmp_path: Path) -> None:
    async with running_worker(tmp_path / "log") as worker:
        async with Connector(worker.url, program="test", instance="r") as conn:
            s = await conn.stream(7, "seven")
            for i in range(40):
                await s.send(b"%d" % i)
            await eventually(lambda: worker.durable(7) == 40, "40 durable records")
    async with running_worker(tmp_path / "log") as worker:
        async with Connector(worker.url, program="test", instance="r") as conn:
            s = await conn.stream(7, "seven")
            assert s.resume_from == 40
            assert s.next_id == 40
        async with Connector(worker.url, program="test", instance="other") as conn:
            s = await conn.stream(8, "eight")
            assert s.resume_from == 0  # points are per program + instance


async def test_a_stream_of_another_connector_is_refused(tmp_path: Path) -> None:
    async with running_worker(tmp_path / "log") as worker:
        async with Connector(worker.url, program="test", instance="owner") as conn:
            s = await conn.stream(5, "five")
            await s.send(b"mine")
        conn = Connector(worker.url, program="test", instance="intruder", connect_timeout=TIMEOUT)
        await conn.connect()
        with pytest.raises(ConnectorRefused, match="stream 5 belongs to connector 'test/owner'"):
            s = await conn.stream(5, "five")
            await s.send(b"theirs")
            await conn.wait_all_acked(TIMEOUT)
        await conn.close()


async def test_a_stream_whose_files_cannot_be_created_yet_is_retried_not_refused(tmp_path: Path) -> None:
    """A file error on NOTIFY (out of descriptors, a full disk) sends RESTART, not ERROR.

    A regular file where the stream's directory belongs makes ``mkdir`` fail
    with a real OSError; the producer reconnects with backoff until it is
    removed, then everything arrives once and is acked.
    """
    async with running_worker(tmp_path / "log") as worker:
        blocker = tmp_path / "log" / "streams" / "7"
        blocker.write_text("not a directory")
        spark = asyncio.create_task(spark_stand_in(worker))
        try:
            async with Connector(worker.url, program="test", instance="a") as conn:
                s = await conn.stream(7, "seven")
                for i in range(10):
                    await s.send(b"m%d" % i)
                await s.send(None, boundary=True)
                await eventually(lambda: conn.stats.errors, "the worker asking the producer to come back")
                assert worker.durable(7) == 0
                blocker.unlink()  # the condition passes
                await conn.wait_all_acked(TIMEOUT)
                assert conn.stats.connections >= 2  # it came back: never refused
        finally:
            spark.cancel()
        assert worker.stored(7) == [(i, b"m%d" % i) for i in range(10)]


async def test_a_producer_faster_than_the_consumer_is_held_back_by_credits(
    tmp_path: Path,
) -> None:
    credits, max_lag, total = 20, 100, 2000
    async with running_worker(tmp_path / "log", credits=credits, max_lag=max_lag) as worker:
        peak_buffered = 0

        async def send_all() -> None:
            async with Connector(worker.url, program="test", instance="fast") as conn:
                s = await conn.stream(1, "one")
                for i in range(total):
                    await s.send(struct.pack(">Q", i) * 16)
                await conn.wait_all_acked(TIMEOUT)

        producer = asyncio.create_task(send_all())
        # Nobody consumes: the producer must stall once the backlog passes max_lag. It has, for
        # good, once every credit of its session is earned back and withheld: it holds none,
        # and everything it sent on them is durable.
        def stalled() -> bool:
            nonlocal peak_buffered
            peak_buffered = max(peak_buffered, worker.ingest.buffered)
            return worker.ingest.counters.withheld_credits == credits

        await eventually(stalled, "every credit withheld")
        durable = worker.log.durable_end(1)
        assert not producer.done() and worker.ingest.buffered == 0
        assert max_lag < durable <= max_lag + 2 * credits
        assert peak_buffered <= credits

        # The consumer catches up: credits flow again and everything arrives once.
        for _ in range(int(TIMEOUT / 0.01)):
            if producer.done():
                break
            worker.commit_all()
            peak_buffered = max(peak_buffered, worker.ingest.buffered)
            assert worker.ingest.lag <= max_lag + 2 * credits
            await asyncio.sleep(0.01)
        await producer
        assert worker.stored(1) == [(i, struct.pack(">Q", i) * 16) for i in range(total)]
        assert peak_buffered <= credits


async def test_acks_follow_the_connector_when_an_abandoned_attempt_is_read_after_its_retry(
    tmp_path: Path,
) -> None:
    """A producer gives up on an attempt and reconnects; the bridge reads the abandoned
    attempt's HELLO after the new session's (it sat in the socket buffer). When that dead
    session ends, the acks must reach the live one: they stopped for good before."""
    async with running_worker(tmp_path / "log") as worker:
        spark = asyncio.create_task(spark_stand_in(worker))
        try:
            async with Connector(worker.url, program="raw", instance="p") as conn:
                stream = await conn.stream(1, "s")
                await stream.send(b"before")
                await asyncio.wait_for(stream.wait_acked(1), TIMEOUT)
                ok, abandoned = await _raw_session(worker.port, [_hello("p")])  # read after the live one
                assert isinstance(ok, f.Ok)
                abandoned.close()  # the producer had given up on it
                await abandoned.wait_closed()
                await eventually(lambda: worker.ingest.counters.sessions == 1, "the abandoned session to end")
                for i in range(20):
                    await stream.send(b"after %d" % i)
                await asyncio.wait_for(stream.wait_acked(21), TIMEOUT)
                assert stream.acked == 21 and stream.unacked == 0
        finally:
            spark.cancel()
