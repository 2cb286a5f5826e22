"""A producer is acked only for what every query that drives acks committed, at every door.

OK says what is durable; ACK says what the sinks committed. The records a
premature ACK lets a producer forget are still in the log, so a sink check
alone cannot see one: these tests watch the producer's acked point itself,
without Spark. "Spark committed" is a call of the entry point the bridge's
commit signals call (:meth:`Ingest.on_committed`, or
:meth:`ConsumerPositions.on_committed` for several consumers, or a
:class:`CommitListener` fed a progress event).

Every "not acked" check follows a *probe*: a record on another stream of the
same connector, committed and then acked on the same connection. Frames of
one connection arrive in order, so once the probe's ACK is in, any ACK the
bridge sent before it (an ACK at the new session's HELLO, above all) is in
too: the check does not depend on waiting long enough.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from pyspark.sql.streaming.listener import QueryProgressEvent

from aqueduct.bridge.app.commit_listener import CommitListener
from aqueduct.bridge.ingest.positions import ConsumerPositions
from aqueduct.bridge.ingest.service import Ingest
from aqueduct.bridge.storage.consumers import register_consumer
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.frames import ConnectorMessage
from aqueduct.connector.producer.client import Connector, ConnectorStream
from aqueduct.connector.wallaroo.frames import NO_POINT
from aqueduct.connector.wallaroo.worker_session import WallarooSession
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig
from tests.waiting import wait_until
from tests.wallaroo_client import WallarooSource

TIMEOUT = 30.0  # only turns a hang into a failure
DATA, PROBE = 1, 99  # the stream under test, and the probe stream of the same connector
EPOCH_A = 6  # offsets 0..5: five records and a BOUNDARY
EPOCH_B = 11  # offsets 6..10: four records and a BOUNDARY


class Worker:
    """A bridge without Spark: log, ingest and TCP listener, restartable on the same port."""

    def __init__(self, path: Path, consumers: tuple[str, ...] = (), session: type | None = None) -> None:
        self.path = path
        self.consumer_names = consumers
        self.session = session
        self.port = 0
        self.restarts = 0

    async def start(self) -> None:
        self.log = DurableLog(self.path)
        self.ingest = Ingest(self.log)
        self.positions: ConsumerPositions | None = None
        if self.consumer_names:
            for name in self.consumer_names:
                register_consumer(self.path, name, {}, acks=True)
            self.positions = ConsumerPositions(self.path, self.ingest)
        extra = () if self.session is None else (WorkerConfig(), self.session)
        self.server = await serve_tcp("127.0.0.1", self.port, self.ingest, *extra)
        self.port = self.server.port
        self.commits = asyncio.create_task(self.ingest.run())

    async def stop(self) -> None:
        await self.server.close()
        self.commits.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.commits
        self.log.close()

    async def restart(self) -> None:
        """The bridge process ends and starts again: a new log object and ingest over the same files."""
        await self.stop()
        await self.start()
        self.restarts += 1

    def commit(self, positions: Mapping[int, int], consumer: str | None = None) -> None:
        """Spark (the named consumer's query) committed every record below ``positions``."""
        if consumer is None:
            self.ingest.on_committed(positions)
        else:
            assert self.positions is not None
            self.positions.on_committed(consumer, positions)

    async def durable(self, sid: int, offset: int) -> None:
        await wait_until(
            lambda: sid in self.log.stream_ids() and self.log.complete_offset(sid) >= offset,
            f"stream {sid} complete up to {offset}",
            TIMEOUT,
        )


@contextlib.asynccontextmanager
async def worker(
    path: Path, consumers: tuple[str, ...] = (), session: type | None = None
) -> AsyncIterator[Worker]:
    w = Worker(path, consumers, session)
    await w.start()
    try:
        yield w
    finally:
        await w.stop()


@contextlib.asynccontextmanager
async def connector(w: Worker) -> AsyncIterator[Connector]:
    async with Connector(
        f"tcp://127.0.0.1:{w.port}", program="t", instance="acks", backoff=(0.02, 0.1)
    ) as conn:
        yield conn


async def send_epoch(stream: ConnectorStream, records: int) -> None:
    for _ in range(records):
        await stream.send(b"r%d" % stream.next_id)
    await stream.send(None, boundary=True)


async def two_epochs(w: Worker, conn: Connector) -> ConnectorStream:
    """Stream DATA with epochs A and B, both durable, nothing committed."""
    stream = await conn.stream(DATA, "data")
    await send_epoch(stream, 5)
    await send_epoch(stream, 4)
    await w.durable(DATA, EPOCH_B)
    return stream


async def probe(w: Worker, conn: Connector, consumers: tuple[str, ...] = ()) -> None:
    """Round trip on the connector's current connection: every ACK sent before is now received."""
    stream = await conn.stream(PROBE, "probe")
    await stream.send(None, boundary=True)
    end = stream.next_id
    await w.durable(PROBE, end)
    for consumer in consumers or (None,):
        w.commit({PROBE: w.log.complete_offset(PROBE)}, consumer)
    await stream.wait_acked(end, TIMEOUT)


async def reconnected(conn: Connector, connections: int) -> None:
    await wait_until(lambda: conn.stats.connections >= connections and conn.connected, "a new session", TIMEOUT)


async def test_the_first_session_is_acked_exactly_what_was_committed(tmp_path: Path) -> None:
    async with worker(tmp_path / "log") as w, connector(w) as conn:
        stream = await two_epochs(w, conn)
        await probe(w, conn)
        assert (stream.acked, stream.unacked) == (0, EPOCH_B)  # durable, not committed
        w.commit({DATA: EPOCH_A})
        await stream.wait_acked(EPOCH_A, TIMEOUT)
        await probe(w, conn)
        assert (stream.acked, stream.unacked) == (EPOCH_A, EPOCH_B - EPOCH_A)


async def test_a_reconnect_after_a_bridge_restart_is_not_acked_what_is_only_durable(tmp_path: Path) -> None:
    async with worker(tmp_path / "log") as w, connector(w) as conn:
        stream = await two_epochs(w, conn)
        w.commit({DATA: EPOCH_A})
        await stream.wait_acked(EPOCH_A, TIMEOUT)
        await w.restart()  # the new ingest knows nothing committed until a commit signal says so
        await reconnected(conn, 2)
        await probe(w, conn)
        assert (stream.acked, stream.unacked) == (EPOCH_A, EPOCH_B - EPOCH_A)
        w.commit({DATA: EPOCH_B})
        await stream.wait_acked(EPOCH_B, TIMEOUT)
        assert stream.unacked == 0


async def test_a_resumed_stream_is_acked_only_what_was_committed(tmp_path: Path) -> None:
    async with worker(tmp_path / "log") as w, connector(w) as conn:
        stream = await two_epochs(w, conn)
        w.commit({DATA: EPOCH_A})
        await stream.wait_acked(EPOCH_A, TIMEOUT)
        (peer,) = w.server.peers
        await peer.restart()  # the bridge asks the connector to come back: a new session, same ingest
        await reconnected(conn, 2)
        await stream.send(b"after")  # the stream resumes on the new session ...
        await stream.send(None, boundary=True)  # ... with a third epoch, made durable
        await w.durable(DATA, EPOCH_B + 2)
        await probe(w, conn)
        assert (stream.resume_from, stream.acked) == (EPOCH_B, EPOCH_A)
        w.commit({DATA: EPOCH_B + 2})
        await stream.wait_acked(EPOCH_B + 2, TIMEOUT)


async def test_a_consumer_that_has_not_committed_holds_the_ack_across_a_reconnect(tmp_path: Path) -> None:
    both = ("fast", "slow")
    async with worker(tmp_path / "log", consumers=both) as w, connector(w) as conn:
        stream = await two_epochs(w, conn)
        w.commit({DATA: EPOCH_B}, "fast")
        w.commit({DATA: EPOCH_A}, "slow")
        await stream.wait_acked(EPOCH_A, TIMEOUT)
        await probe(w, conn, both)
        assert stream.acked == EPOCH_A  # the slower consumer's position, not the faster one's
        (peer,) = w.server.peers
        await peer.restart()
        await reconnected(conn, 2)
        await probe(w, conn, both)
        assert stream.acked == EPOCH_A
        w.commit({DATA: EPOCH_B}, "slow")
        await stream.wait_acked(EPOCH_B, TIMEOUT)


def progress(query: str, end: dict[str, int], latest: dict[str, int]) -> QueryProgressEvent:
    """A progress event as Spark 4.3 serializes it, its source's endOffset and latestOffset differing."""
    source = {
        "description": "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStream@1",
        "startOffset": None, "endOffset": end, "latestOffset": latest,
        "numInputRows": 1, "inputRowsPerSecond": 1.0, "processedRowsPerSecond": 1.0,
    }  # fmt: skip
    return QueryProgressEvent.fromJson(
        {
            "progress": {
                "id": "0a2c2d5e-5a8c-4f9e-9d4c-1f0e8d0c7b6a", "runId": "6f7e6d5c-4b3a-4291-8f7e-6d5c4b3a2918",
                "name": query, "timestamp": "2026-01-01T00:00:00.000Z", "batchId": 0, "batchDuration": 1,
                "stateOperators": [], "sources": [source], "sink": {"description": "ForeachBatchSink", "numOutputRows": 1},
            }
        }
    )  # fmt: skip


async def test_the_commit_listener_acks_the_committed_end_not_the_latest_offset(tmp_path: Path) -> None:
    """Spark plans to latestOffset but commits endOffset: a limited trigger leaves the two apart."""
    async with worker(tmp_path / "log", consumers=("default",)) as w, connector(w) as conn:
        listener = CommitListener(lambda consumer, positions: w.commit(positions, consumer))
        listener.watch("bridge", "default")
        stream = await two_epochs(w, conn)
        probe_stream = await conn.stream(PROBE, "probe")
        await probe_stream.send(None, boundary=True)
        await w.durable(PROBE, 1)
        listener.onQueryProgress(
            progress("bridge", end={str(DATA): EPOCH_A, str(PROBE): 1}, latest={str(DATA): EPOCH_B, str(PROBE): 1})
        )
        await probe_stream.wait_acked(1, TIMEOUT)
        assert stream.acked == EPOCH_A


async def test_a_wallaroo_client_is_acked_only_after_the_commit_also_after_a_restart(tmp_path: Path) -> None:
    count = 50
    async with worker(tmp_path / "log", session=WallarooSession) as w:
        source = WallarooSource(w.port, {DATA: "data", PROBE: "probe"}, count, timeout=TIMEOUT)
        client = asyncio.create_task(source.run())
        try:
            await w.durable(DATA, count)
            await w.durable(PROBE, count)
            assert source.acked == {DATA: NO_POINT, PROBE: NO_POINT}
            w.commit({PROBE: count})  # the probe: its ACK follows any the bridge sent this session
            await wait_until(lambda: source.acked[PROBE] == count - 1, "the probe's ACK", TIMEOUT)
            assert source.acked[DATA] == NO_POINT
            (peer,) = w.server.peers
            await peer.restart()  # the client resumes on a new session: nothing acked at its HELLO
            # NOTIFY_ACKs follow the session's HELLO-time ACK, if any, on the same connection
            await wait_until(lambda: len(source.stats.resumed_from) == 2, "the resumed session's NOTIFY_ACKs", TIMEOUT)
            assert source.acked[DATA] == NO_POINT
            w.commit({DATA: count // 2})
            await wait_until(lambda: source.acked[DATA] == count // 2 - 1, "the committed half acked", TIMEOUT)
            w.commit({DATA: count})
            stats = await asyncio.wait_for(client, TIMEOUT)
            assert source.acked == {DATA: count - 1, PROBE: count - 1} and stats.connections == 2
        finally:
            client.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await client


async def test_truncation_never_passes_what_was_acked(tmp_path: Path) -> None:
    """A consumer that does not drive acks may be ahead; the log keeps what producers were not told.

    (On the bridge's loop, as in the bridge: ``on_committed`` sends its ACKs from a task.)
    """
    with DurableLog(tmp_path / "log", segment_bytes=1) as log:  # a segment per group commit
        log.open_stream(DATA, "data", "t/acks").result()
        ids = iter(range(100))
        for size in (5, 4, 3):  # epochs A, B and an uncommitted C, each in its own segment
            for _ in range(size):
                log.append(ConnectorMessage.build(DATA, b"r", message_id=next(ids)))
            log.append(ConnectorMessage.build(DATA, message_id=next(ids), boundary=True))
            log.commit()
        ingest = Ingest(log)
        ingest.on_committed({DATA: EPOCH_A})
        ingest.truncate_below({DATA: EPOCH_B})  # e.g. every consumer read B, the ack consumer committed A
        # the log's I/O thread runs jobs in order: this one ends after the truncation
        assert log.truncate(DATA, 0).result() == EPOCH_A


async def test_a_sink_commit_acks_and_truncation_waits_for_the_commit_log(tmp_path: Path) -> None:
    """Acked from the file sink's own log, the batch's records stay until Spark's commit log has it.

    (A query stopped between the two runs the batch again on restart: it must still find its records.)
    """
    with DurableLog(tmp_path / "log", segment_bytes=1) as log:  # a segment per group commit
        log.open_stream(DATA, "data", "t/acks").result()
        ids = iter(range(100))
        for size in (5, 4):  # epochs A and B, each in its own segment
            for _ in range(size):
                log.append(ConnectorMessage.build(DATA, b"r", message_id=next(ids)))
            log.append(ConnectorMessage.build(DATA, message_id=next(ids), boundary=True))
            log.commit()
        register_consumer(log.path, "default", {}, acks=True)
        positions = ConsumerPositions(log.path, Ingest(log))
        positions.on_sink_committed("default", {DATA: EPOCH_A})
        assert positions.ingest.committed_offsets()[DATA] == EPOCH_A  # acked
        assert log.truncate(DATA, 0).result() == 0  # (runs after any truncation queued before it) kept
        positions.on_committed("default", {DATA: EPOCH_A})
        assert log.truncate(DATA, 0).result() == EPOCH_A
