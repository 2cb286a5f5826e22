"""In a reconnect storm a session starts with a couple of credits and the rest wait until the storm is over.

A real ingest on a real log, sessions fed the connector's own frames, and
the ACKs they send read back with the connector's decoder. The storm is
what the application's listeners report (``Credits.storming``); here a
switch the test flips.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from aqueduct.bridge.ingest.config import IngestConfig
from aqueduct.bridge.ingest.credits import STORM_CREDITS, STORM_HOLD
from aqueduct.bridge.ingest.service import Ingest
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.frames import (
    PROTOCOL_VERSION,
    Ack,
    ConnectorMessage,
    FrameSplitter,
    Hello,
    Notify,
    Ok,
    encode,
)
from aqueduct.connector.worker.server import WorkerPeer
from aqueduct.connector.worker_session import WorkerConfig
from aqueduct.wire.modes import Mode

SESSION_CREDITS = 100
TIMEOUT = 10.0  # only turns a hang into a failure


class Session:
    """A connector session on the ingest; ``granted`` adds up the credits its OK and ACKs gave."""

    def __init__(self, ingest: Ingest, name: str, ok_credits: int = 0) -> None:
        self.frames: list[object] = []
        self.splitter = FrameSplitter()
        self.name = name
        self.peer = WorkerPeer(ingest, WorkerConfig(initial_credits=ok_credits), self._send, lambda: None)

    async def _send(self, data: bytes) -> None:
        self.frames.extend(self.splitter.feed(data))

    async def start(self, stream_id: int) -> None:
        """HELLO; once credits came (a NOTIFY takes one, given back at once), NOTIFY its stream."""
        await self.peer.receive_payload(encode(Hello(PROTOCOL_VERSION, b"", "storm", self.name)), mode=Mode.ORDERED)
        await self.sent()
        await self.peer.receive_payload(encode(Notify(stream_id, f"s{stream_id}", 0)), mode=Mode.ORDERED)
        await self.sent()
        assert not self.peer.ended, self.frames

    async def send(self, stream_id: int, ids: range) -> None:
        records = b"".join(encode(ConnectorMessage(0, stream_id, i, payload=b"x")) for i in ids)
        await self.peer.receive_payload(records, mode=Mode.ORDERED, channel_stream=1)
        await self.sent()

    @staticmethod
    async def sent() -> None:
        """Let the session's writer send what is queued (a few turns of the loop)."""
        for _ in range(5):
            await asyncio.sleep(0)

    @property
    def granted(self) -> int:
        return sum(f.credits for f in self.frames if isinstance(f, Ok | Ack))


async def test_a_session_started_in_a_storm_gets_its_first_credits_then_the_rest_once_it_is_over(tmp_path: Path) -> None:
    storm = True
    with DurableLog(tmp_path / "log") as log:
        ingest = Ingest(log, IngestConfig(session_credits=SESSION_CREDITS))
        ingest.credits.storming = lambda: storm
        running = asyncio.ensure_future(ingest.run())
        try:
            session = Session(ingest, "p1")
            await session.start(1)
            assert session.granted == STORM_CREDITS + 1  # its first records (+ the NOTIFY's), not its whole share
            await session.send(1, range(STORM_CREDITS))
            await ingest.group_commit()  # durable: those credits are earned back ...
            await session.sent()
            assert session.granted == STORM_CREDITS + 1  # ... and held while the storm lasts
            assert log.durable_end(1) == STORM_CREDITS

            storm = False  # the listeners refuse nobody any more: the ingest's own watch sends the rest
            async with asyncio.timeout(TIMEOUT):
                while session.granted < SESSION_CREDITS + STORM_CREDITS + 1:
                    await asyncio.sleep(0.05)
            assert session.granted == SESSION_CREDITS + STORM_CREDITS + 1  # its share, and the two it spent
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)


async def test_without_a_storm_a_session_gets_its_whole_share_at_once(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log") as log:
        ingest = Ingest(log, IngestConfig(session_credits=SESSION_CREDITS))
        ingest.credits.storming = lambda: False
        quic = Session(ingest, "quic")  # the QUIC listener's OK grants nothing: the ingest does
        await quic.start(1)
        tcp = Session(ingest, "tcp", ok_credits=SESSION_CREDITS)  # the other listeners' OK grants it all
        await tcp.start(2)
    assert quic.granted == tcp.granted == SESSION_CREDITS + 1  # (+ the NOTIFY's credit, given back)
    assert not any(isinstance(f, Ack) and f.credits > 1 for f in tcp.frames)  # nothing more than before


async def test_a_session_that_started_before_the_storm_is_served_as_before(tmp_path: Path) -> None:
    storm = False
    with DurableLog(tmp_path / "log") as log:
        ingest = Ingest(log, IngestConfig(session_credits=SESSION_CREDITS))
        ingest.credits.storming = lambda: storm
        served = Session(ingest, "served")
        await served.start(1)
        storm = True  # a dead bridge's producers arrive
        newcomer = Session(ingest, "newcomer")
        await newcomer.start(2)
        await served.send(1, range(10))
        await newcomer.send(2, range(STORM_CREDITS))
        await ingest.group_commit()
        await served.sent()
    assert served.granted == SESSION_CREDITS + 1 + 10  # its credits come back as the log takes its records
    assert newcomer.granted == STORM_CREDITS + 1  # held: it is back, it waits while the others connect


async def test_a_storm_that_does_not_end_holds_a_newcomer_only_so_long(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log") as log:
        ingest = Ingest(log, IngestConfig(session_credits=SESSION_CREDITS))
        ingest.credits.storming = lambda: True  # refusing for good: overloaded
        session = Session(ingest, "p1")
        await session.start(1)
        started = time.monotonic()
        assert not ingest.credits.release_storm(started + STORM_HOLD / 2)
        assert ingest.credits.release_storm(started + STORM_HOLD)
        ingest.acks.release()
        await session.sent()
    assert session.granted == SESSION_CREDITS + 1
