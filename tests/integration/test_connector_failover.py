"""Producers given several bridges move when theirs dies: real bridge processes, real kills.

Two ``aqueduct-bridge serve --ingest-only`` processes on loopback, each
read by a stand-in query (:class:`~tests.stand_in_query.StandInQuery`:
the ``aqueduct`` source's reader over Flight, committing as ``default``,
so a bridge acks only what that query committed). Producers are given both
URLs; bridge 1 is SIGKILLed a moment in and its log directory deleted.
Verdicts: every record acked, each producer's delivery report once per
record; the records bridge 1's query had not committed are in bridge 2's
log once each with their payload, and the two queries' rows together hold
every record (what both committed: the ids bridge 1's query committed and
bridge 1 had not acked yet may be in both, the source's failover reads one
stream across bridges in id space). With ``replicas=2`` the producers send
to both bridges all along and never move: bridge 2 holds every record.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import sys
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from aqueduct.connector.producer.client import Connector, Delivery
from bench.fleet_processes import FleetBridge
from bench.processes import free_port
from tests.stand_in_query import StandInQuery, bridge_options
from tests.waiting import finish, wait_until

TIMEOUT = 60.0  # only turns a hang into a failure
MOVE_AFTER = 1.0
RECORDS = 600  # per stream
STREAMS = 2  # per producer
PRODUCERS = 2


def payload(stream_id: int, message_id: int) -> bytes:
    return b"stream %d message %d" % (stream_id, message_id)


@dataclass
class QueriedBridge:
    """A fleet's ingest-only bridge process (with a QUIC listener too) and the stand-in query reading it."""

    bridge: FleetBridge
    rows: list[dict] = field(default_factory=list)  # what its query read and committed
    _query: asyncio.Task[None] | None = None
    _stop_query: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    def at(cls, root: Path, name: str) -> QueriedBridge:
        """One under ``root/name``, with the bridge's default credits."""
        return cls(FleetBridge(name, root / name, credits=None, quic_port=free_port(socket.SOCK_DGRAM)))

    def url(self, scheme: str) -> str:
        return self.bridge.url_for(scheme)

    async def start(self) -> None:
        await self.bridge.start()
        self._query = asyncio.create_task(self._run_query())

    async def _run_query(self) -> None:
        options = bridge_options(self.bridge.flight, self.bridge.log_dir)
        query = await asyncio.to_thread(StandInQuery, options)
        while not self._stop_query.is_set():
            self.rows += await asyncio.to_thread(query.micro_batch)
            await asyncio.sleep(0.05)

    async def stop_query(self) -> None:
        """Let the query finish the micro-batch it is in, then stop it."""
        self._stop_query.set()
        if self._query is not None:
            await asyncio.wait_for(self._query, TIMEOUT)

    async def kill(self) -> None:
        """The query stopped between micro-batches, then SIGKILL, then the log directory deleted."""
        await self.stop_query()
        await self.bridge.kill(lose_log=True)

    async def close(self) -> None:
        self._stop_query.set()
        if self._query is not None:
            self._query.cancel()
            with contextlib.suppress(BaseException):
                await self._query
        await self.bridge.stop()


@pytest.fixture
async def bridges(tmp_path: Path):
    pair = [QueriedBridge.at(tmp_path, f"bridge{n}") for n in (1, 2)]
    try:
        for bridge in pair:
            await bridge.start()
        yield pair
    finally:
        for bridge in pair:
            await bridge.close()


def ca_bundle(tmp_path: Path, bridges: list[QueriedBridge]) -> str:
    """One CA file verifying every bridge (each generated its own CA)."""
    bundle = tmp_path / "bridges-ca.pem"
    bundle.write_text("".join(b.bridge.ca.read_text() for b in bridges))
    return str(bundle)


class Producer:
    """A library producer: its streams, what it sent, and its delivery reports."""

    def __init__(self, number: int, urls: list[str], cafile: str, **options: float) -> None:
        self.stream_ids = [100 * number + s for s in range(STREAMS)]
        self.reports: list[tuple[Exception | None, Delivery]] = []
        self.conn = Connector(urls, program="failover", instance=f"p{number}", cafile=cafile,
                              on_delivery=lambda e, d: self.reports.append((e, d)), **{"move_after": MOVE_AFTER, **options})  # fmt: skip

    async def run(self, gates: list[asyncio.Event]) -> None:
        """Send a part of every stream's records as each gate opens, a few at a time; then wait for every ACK."""
        async with self.conn:
            streams = [await self.conn.stream(sid, f"failover/{sid}") for sid in self.stream_ids]
            part = RECORDS // len(gates)
            for n, gate in enumerate(gates):
                await gate.wait()
                for first in range(n * part, (n + 1) * part, 20):
                    for s in streams:
                        await s.send_many([payload(s.stream_id, m) for m in range(first, first + 20)])
                    await asyncio.sleep(0.01)
            await self.conn.wait_all_acked(TIMEOUT)

    def acked(self) -> int:
        return sum(1 for e, _ in self.reports if e is None)

    def reported_once_each(self) -> bool:
        """Every record of its streams got one delivery report, a success."""
        reports = Counter((d.stream_id, d.message_id) for _, d in self.reports)
        expected = {(sid, m) for sid in self.stream_ids for m in range(RECORDS)}
        return set(reports) == expected and set(reports.values()) == {1} and all(e is None for e, _ in self.reports)


@contextlib.asynccontextmanager
async def producing(producers: list[Producer], gates: list[asyncio.Event]) -> AsyncIterator[asyncio.Future]:
    """The producers' runs, gathered; cancelled if the test leaves before they end."""
    runs = asyncio.gather(*(p.run(gates) for p in producers))
    try:
        yield runs
    finally:
        runs.cancel()
        with contextlib.suppress(BaseException):
            await runs


@pytest.mark.parametrize("scheme", ["tcp", "aqueduct"])
async def test_producers_move_to_the_other_bridge_when_theirs_is_killed_and_every_record_is_acked_once(
    tmp_path: Path, bridges: list[QueriedBridge], scheme: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="aqueduct.connector.producer.client")
    first, second = bridges
    urls = [first.url(scheme), second.url(scheme)]
    producers = [Producer(n, urls, ca_bundle(tmp_path, bridges)) for n in range(PRODUCERS)]
    gates = [asyncio.Event() for _ in range(3)]
    async with producing(producers, gates) as runs:
        gates[0].set()  # records bridge 1's query commits: acked there, never resent
        await wait_until(lambda: all(p.acked() > 0 for p in producers), "acks from bridge 1", TIMEOUT)
        await first.stop_query()
        gates[1].set()  # records durable on bridge 1, never committed: the move resends them
        two_parts = PRODUCERS * STREAMS * 2 * (RECORDS // 3)
        await wait_until(lambda: first.bridge.durable() >= two_parts, "two parts durable on bridge 1", TIMEOUT)
        gates[2].set()  # records sent while the producers move
        await first.kill()
        await asyncio.wait_for(runs, TIMEOUT)
        await wait_until(lambda: len(second.rows) >= PRODUCERS * STREAMS * RECORDS - len(first.rows),
                         "bridge 2's query reading what bridge 1's did not", TIMEOUT)  # fmt: skip
        await second.stop_query()

    for p in producers:
        assert p.conn.stats.moves >= 1 and p.conn.bridge == second.url(scheme)
        assert p.reported_once_each()
    moved = [r.getMessage() for r in caplog.records if r.getMessage().startswith("moved from ")]
    assert moved and all(m.startswith(f"moved from {urls[0]} to {urls[1]}: ") for m in moved)

    on_second = Counter((r["stream_id"], r["message_id"]) for r in second.rows)
    assert set(on_second.values()) == {1}  # bridge 2's log: each record once
    committed_first = {(r["stream_id"], r["message_id"]) for r in first.rows}
    every = {(sid, m) for p in producers for sid in p.stream_ids for m in range(RECORDS)}
    assert set(on_second) == every - committed_first  # what bridge 1's query did not commit, all moved
    for r in (*first.rows, *second.rows):
        assert r["payload"] == payload(r["stream_id"], r["message_id"])


@pytest.mark.parametrize("scheme", ["tcp", "aqueduct"])
async def test_a_producer_whose_first_bridge_is_down_starts_on_the_second(
    tmp_path: Path, bridges: list[QueriedBridge], scheme: str
) -> None:
    dead = QueriedBridge.at(tmp_path, "never-started")  # its ports: nobody listens there
    urls = [dead.url(scheme), bridges[1].url(scheme)]
    conn = Connector(urls, program="failover", instance="late", cafile=ca_bundle(tmp_path, bridges[1:]),
                     move_after=MOVE_AFTER, connect_timeout=TIMEOUT)  # fmt: skip
    async with conn:
        assert conn.bridge == urls[1] and conn.stats.moves == 1  # one move: after move_after on the first
        assert conn.stats.retries >= 1 and all("connect" in e for e in conn.stats.errors)
        stream = await conn.stream(7, "late/7")
        ids = await stream.send_many([payload(7, m) for m in range(10)])
        assert ids == list(range(10))
        await stream.wait_acked(10, TIMEOUT)


async def test_aqueduct_produce_moves_and_says_so_in_its_summary(tmp_path: Path, bridges: list[QueriedBridge]) -> None:
    first, second = bridges
    urls = f"{first.url('tcp')},{second.url('tcp')}"
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("aqueduct-produce")), urls, "--count", "400", "--streams", "2", "--rate", "200",
        "--move-after", str(MOVE_AFTER), "--json", "--program", "failover-cli",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    await wait_until(lambda: bool(first.rows), "bridge 1's query reading the producer's records", TIMEOUT)
    await first.kill()
    status, out, err = await finish(proc, TIMEOUT)
    assert status == 0, err
    summary = json.loads(out)
    assert summary["moves"] >= 1 and summary["bridge"] == second.url("tcp")
    assert summary["acked"] == summary["sent"] == 800 and not summary["errors"]
    assert f"moved from {first.url('tcp')} to {second.url('tcp')}" in err


@pytest.mark.parametrize("scheme", ["tcp", "aqueduct"])
async def test_with_two_replicas_a_killed_bridge_costs_nothing_the_other_acks_everything(
    tmp_path: Path, bridges: list[QueriedBridge], scheme: str
) -> None:
    first, second = bridges
    urls = [first.url(scheme), second.url(scheme)]
    # move_after far away: no move, no silence noticed in time, can explain the progress after the kill
    producers = [Producer(n, urls, ca_bundle(tmp_path, bridges), replicas=2, move_after=60.0) for n in range(PRODUCERS)]
    gates = [asyncio.Event() for _ in range(2)]
    async with producing(producers, gates) as runs:
        gates[0].set()
        await wait_until(lambda: all(p.acked() > 0 for p in producers), "the first acks", TIMEOUT)
        gates[1].set()  # the rest is sent while bridge 1 dies
        await first.kill()
        await asyncio.wait_for(runs, TIMEOUT)
        every = {(sid, m) for p in producers for sid in p.stream_ids for m in range(RECORDS)}
        await wait_until(lambda: len(second.rows) >= len(every), "bridge 2's query reading everything", TIMEOUT)
        await second.stop_query()

    for p in producers:
        assert p.conn.stats.moves == 0 and p.conn.serving == tuple(urls)
        assert p.reported_once_each()
    on_second = Counter((r["stream_id"], r["message_id"]) for r in second.rows)
    assert set(on_second) == every and set(on_second.values()) == {1}  # bridge 2 holds everything, once
    assert first.rows  # bridge 1 served its copy until it died
    for r in (*first.rows, *second.rows):
        assert r["payload"] == payload(r["stream_id"], r["message_id"])
