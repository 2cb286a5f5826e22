"""An ingest-only bridge: listeners, log and the Flight server, no Spark in the process.

A reader elsewhere (here the ``aqueduct`` source's reader, called as Spark
calls it, in this process but through the network path only) reads the
records over Flight and commits as consumer ``default``; the producers are
acked once that commit reached the bridge, not before.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from aqueduct.bridge.app import commit_signals
from aqueduct.bridge.app.service import Bridge, BridgeConfig
from aqueduct.connector.producer.client import Connector
from tests.stand_in_query import StandInQuery
from tests.waiting import after, count_calls

TIMEOUT = 30.0  # only turns a hang into a failure


async def test_an_ingest_only_bridge_acks_after_the_remote_query_committed(tmp_path: Path) -> None:
    config = BridgeConfig(log_dir=tmp_path / "log", tcp=("127.0.0.1", 0), ingest_only=True)
    bridge = Bridge(config)
    await bridge.start(run_query=False)
    assert bridge.positions is not None
    polls = count_calls(bridge.positions, "poll")  # each read of the commit files: a chance to (wrongly) ack
    try:
        options = bridge.source_options()
        assert set(options) == {"bridge", "bridgeTokenFile", "bridgeCA"}  # paths, never the token
        assert options["bridge"].startswith("127.0.0.1:")
        assert bridge.tcp_address is not None
        async with Connector(f"tcp://127.0.0.1:{bridge.tcp_address[1]}", program="t", instance="i") as conn:
            stream = await conn.stream(1, "s")
            for i in range(10):
                await stream.send(b"m%d" % i)
            await stream.send(None, boundary=True)
            for _ in range(int(TIMEOUT / 0.05)):  # bounded: the epoch is durable
                if bridge.log is not None and 1 in bridge.log.stream_ids() and bridge.log.complete_offset(1) > 0:
                    break
                await asyncio.sleep(0.05)
            await after(polls, "reads of the commit files", TIMEOUT, more=2)  # the second began once durable
            assert stream.acked == 0  # durable, not committed: no ack yet
            query = StandInQuery({**options, "consumer": "default"})
            payloads = [row["payload"] for row in await asyncio.to_thread(query.micro_batch)]
            assert sorted(payloads) == sorted(b"m%d" % i for i in range(10))
            await conn.wait_all_acked(TIMEOUT)  # the commit file the Flight call wrote, polled
            assert stream.acked == 11
    finally:
        await bridge.stop()
    assert bridge.flight_server is None


async def test_a_remote_query_s_commit_acks_at_once_not_at_the_next_read_of_the_commit_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Flight ``commit`` call itself reaches the acks: with the commit files' safety net an hour away, producers are acked."""
    monkeypatch.setattr(commit_signals, "SAFETY_NET_INTERVAL", 3600.0)
    bridge = Bridge(BridgeConfig(log_dir=tmp_path / "log", tcp=("127.0.0.1", 0), ingest_only=True))
    await bridge.start(run_query=False)
    try:
        assert bridge.tcp_address is not None
        async with Connector(f"tcp://127.0.0.1:{bridge.tcp_address[1]}", program="t", instance="i") as conn:
            stream = await conn.stream(1, "s")
            await stream.send_many([b"m%d" % i for i in range(10)])
            await stream.send(None, boundary=True)
            query = StandInQuery({**bridge.source_options(), "consumer": "default"})
            rows: list[dict] = []
            for _ in range(int(TIMEOUT / 0.05)):  # bounded: the epoch becomes durable, then readable
                rows += await asyncio.to_thread(query.micro_batch)
                if len(rows) == 10:
                    break
                await asyncio.sleep(0.05)
            await conn.wait_all_acked(TIMEOUT)
            assert stream.acked == 11
    finally:
        await bridge.stop()
