"""SIGKILL between the ACK decision and the ACK: no producer is ever told a lower point than before.

The ingest runs in its own process (``small_disk_bridge.py``: the bridge's
``Ingest`` and durable log, a Spark stand-in committing every 50 ms) and is
SIGKILLed from inside at the bridge's n-th write of the acked offsets
(``inject/sitecustomize.py``): as the write begins (ACKs decided, nothing
recorded), between its two copies, and once both are durable but before
the ACKs go out; each time restarted on the same log and port. A real
``Connector`` over TCP keeps sending; its session is a ``ConnectorSession``
that also records every ACK frame it got, across all its connections.
Verdicts: per stream the ACK points never go down, the last one covers
everything, and the log holds every record once with its payload.
"""

from __future__ import annotations

import asyncio
import random
import signal
import socket
from itertools import pairwise
from pathlib import Path

import pytest

from aqueduct.connector.producer import client
from aqueduct.connector.producer.client import Connector
from tests.recording_session import RecordingSession
from tests.reliability.faults import Figures, tally
from tests.reliability.ingest_child import TIMEOUT, IngestChild
from tests.reliability.injection import fault_env, faults_reached

STREAMS = (1, 2)
PHASES = ("decided", "half", "recorded")


def payload(stream_id: int, message_id: int) -> bytes:
    return b"stream %d message %d" % (stream_id, message_id)


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_acks_never_go_backwards_across_kills_between_the_ack_decision_and_the_ack(
    tmp_path: Path, rng: random.Random, figures: Figures, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(RecordingSession, "acks", [])
    monkeypatch.setattr(client, "ConnectorSession", RecordingSession)
    faults = [f"acked:{phase}:{rng.randint(2, 6)}" for phase in rng.sample(PHASES, len(PHASES))]
    port, mark, stderr = free_tcp_port(), tmp_path / "faults", tmp_path / "bridge.log"
    (tmp_path / "log").mkdir()
    args = ["--mount", str(tmp_path / "log"), "--port", str(port)]
    sent = dict.fromkeys(STREAMS, 0)
    done = asyncio.Event()

    async def produce() -> None:
        async with Connector(f"tcp://127.0.0.1:{port}", program="p", instance="acks", backoff=(0.02, 0.2)) as conn:
            handles = [await conn.stream(sid, f"s{sid}") for sid in STREAMS]
            while not done.is_set():
                for h in handles:
                    await h.send(payload(h.stream_id, sent[h.stream_id]))
                    sent[h.stream_id] += 1
            await conn.wait_all_acked(TIMEOUT)

    bridge = await IngestChild.start(args, stderr, env=fault_env(faults[0], mark))
    producer = asyncio.create_task(produce())
    try:
        for i, fault in enumerate(faults):
            status = await asyncio.wait_for(bridge.proc.wait(), TIMEOUT)  # the fault fires by itself
            assert status == -signal.SIGKILL, stderr.read_text()[-2000:]
            assert faults_reached(mark)[-1].startswith(fault + " "), faults_reached(mark)
            after = faults[i + 1] if i + 1 < len(faults) else None
            bridge = await IngestChild.start(args, stderr, env=fault_env(after, mark) if after else None)
        acks_before_last_start = len(RecordingSession.acks)
        await bridge.until("acks from the last bridge too", lambda _: len(RecordingSession.acks) > acks_before_last_start)
        done.set()
        await asyncio.wait_for(producer, TIMEOUT)
        stored = await bridge.stop()
    finally:
        producer.cancel()
        await bridge.kill()
    acks = RecordingSession.acks
    t = tally({s: {m: payload(s, m) for m in range(sent[s])} for s in STREAMS}, stored)
    figures.count(t)
    figures.faults = {"sigkill_at_acked_write": faults}
    figures.extra = {"acks": len(acks), "connections": RecordingSession.connections}

    assert t.exactly_once, t
    for sid in STREAMS:
        points = [(conn, point) for conn, s, point in acks if s == sid]
        assert all(a[1] <= b[1] for a, b in pairwise(points)), points  # never lower than before, across restarts
        assert points[-1][1] == sent[sid]  # and in the end everything
    assert len({conn for conn, _, _ in acks}) == len(faults) + 1  # acks on every connection, before and after each kill
