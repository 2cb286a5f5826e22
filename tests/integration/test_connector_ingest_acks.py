"""Connector + the bridge's ingest service: ACK (committed) versus OK (durable) across reconnects."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aqueduct.bridge.ingest.service import Ingest
from aqueduct.bridge.storage.acked import read_acked
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.producer.client import Connector, ConnectorStream
from aqueduct.connector.worker.tcp_listener import serve_tcp
from tests.ingest_stop import stop_ingest

TIMEOUT = 30.0  # only turns a hang into a failure


async def test_commit_while_the_connector_was_away_is_acked_on_reconnect(tmp_path: Path) -> None:
    """Spark commits while no session is live: the next session still learns it.

    OK only says the messages are durable, so the connector keeps them
    until an ACK; without one on the new session it would wait forever.
    """
    log = DurableLog(tmp_path / "log")
    ingest = Ingest(log)
    commits = asyncio.create_task(ingest.run())
    server = await serve_tcp("127.0.0.1", 0, ingest)
    port = server.port
    try:
        async with Connector(
            f"tcp://127.0.0.1:{port}", program="t", instance="away", backoff=(0.05, 0.2)
        ) as conn:
            stream = await conn.stream(1, "s")
            for i in range(10):
                await stream.send(b"m%d" % i)
            await stream.send(None, boundary=True)  # a complete epoch, for Spark to commit
            for _ in range(int(TIMEOUT / 0.01)):  # bounded poll: the epoch is durable
                if 1 in log.stream_ids() and log.complete_offset(1) > 0:
                    break
                await asyncio.sleep(0.01)
            assert stream.acked == 0 and stream.unacked == 11  # durable, not committed
            await server.close()  # the bridge goes away ...
            ingest.on_committed({1: log.complete_offset(1)})  # ... Spark commits meanwhile
            server = await serve_tcp("127.0.0.1", port, ingest)  # and it comes back
            await conn.wait_all_acked(TIMEOUT)
            assert stream.acked == 11 and conn.stats.connections == 2
    finally:
        await stop_ingest(server, commits, log)


async def test_acks_are_durable_before_they_are_sent_and_a_restart_never_goes_below_them(tmp_path: Path) -> None:
    """An ACK is sent only once ``acked.json`` holds its offset; a restarted ingest starts there.

    The commit files a restarted bridge also reads trail Spark by a
    micro-batch: answering from them sent a reconnecting connector a lower
    point than it had been told before the crash (Wallaroo's client rewinds
    on that).
    """
    log = DurableLog(tmp_path / "log")
    ingest = Ingest(log)
    commits = asyncio.create_task(ingest.run())
    server = await serve_tcp("127.0.0.1", 0, ingest)
    seen_in_file: list[dict[int, int]] = []
    try:
        async with Connector(f"tcp://127.0.0.1:{server.port}", program="t", instance="told") as conn:
            stream = await conn.stream(1, "s")
            await send_one_epoch(stream, log)
            ingest.on_committed({1: 11})
            for _ in range(int(TIMEOUT / 0.001)):  # what the file says the moment the ACK is in
                if stream.acked == 11:
                    seen_in_file.append(read_acked(log.path))
                    break
                await asyncio.sleep(0.001)
    finally:
        await stop_ingest(server, commits, log)
    assert seen_in_file == [{1: 11}]
    with DurableLog(tmp_path / "log") as reopened:  # no commit file: only acked.json knows
        assert Ingest(reopened).committed_offsets() == {1: 11}


async def test_a_stop_closes_the_log_only_after_the_acks_it_decided(tmp_path: Path) -> None:
    """An ACK decided just before a stop is recorded and sent before the log closes.

    Its ``acked.json`` write finishes on the log's I/O thread; a log closed
    before the ACK went out left that task looking up a stream of a closed
    log (``stream 1 was never opened in this log``, a traceback at the stop).
    """
    log = DurableLog(tmp_path / "log")
    ingest = Ingest(log)
    commits = asyncio.create_task(ingest.run())
    server = await serve_tcp("127.0.0.1", 0, ingest)
    try:
        async with Connector(f"tcp://127.0.0.1:{server.port}", program="t", instance="stopping") as conn:
            stream = await conn.stream(1, "s")
            await send_one_epoch(stream, log)
            ingest.on_committed({1: 11})  # the last commit, as the query stops
            await ingest.acks_settled()
            assert read_acked(log.path) == {1: 11}
            await conn.wait_all_acked(TIMEOUT)  # the ACK went out before the log could close
    finally:
        await stop_ingest(server, commits, log)


async def send_one_epoch(stream: ConnectorStream, log: DurableLog) -> None:
    """Ten records and a boundary on stream 1, until the log holds the epoch durably (offset 11)."""
    for i in range(10):
        await stream.send(b"m%d" % i)
    await stream.send(None, boundary=True)
    for _ in range(int(TIMEOUT / 0.01)):  # bounded poll: the epoch is durable
        if 1 in log.stream_ids() and log.complete_offset(1) == 11:
            break
        await asyncio.sleep(0.01)
