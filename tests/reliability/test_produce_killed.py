"""``aqueduct-produce`` SIGKILLed at seeded random points, restarted, against a live worker.

The worker (``serve_tcp`` / ``serve_aqueduct`` with a ``MemorySink``, which
keeps points of reference per program/instance across connections) runs in
this process; the producer is a real ``aqueduct-produce`` subprocess. It is
killed without warning several times mid-stream and started again with the
same command line each time; the last run must finish (exit 0, everything
acked). The sink must then hold every message id of every stream exactly
once, with its payload intact.

The bridge variant (producer killed while the bridge is killed too, output
checked in Parquet) is in ``test_bridge_faults.py``.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from aqueduct.connector.worker.memory_sink import MemorySink
from aqueduct.connector.worker.server import WorkerServer
from aqueduct.connector.worker.tcp_listener import serve_tcp
from tests.reliability.faults import Child, Figures, console_script, tally

pytestmark = pytest.mark.slow  # part of make test; seconds, not minutes

STREAMS = 2
RATE = 4000  # messages per second in total (QUIC in Python manages ~600/s here anyway)
KILLS = 4
# Per transport: messages per stream, and the seeded range of "the sink got this many
# more messages" after which a run is killed (4 kills never reach the total).
SIZES = {"tcp": (4000, (100, 1500)), "aqueduct": (1200, (50, 450))}
TIMEOUT = 60.0
PROGRAM, INSTANCE = "killed-producer", "kp-0"


def payload(stream_id: int, mid: int, size: int = 40) -> bytes:
    """What aqueduct-produce generates for a message (see aqueduct.connector.producer.cli._generated)."""
    return (b"%d:%d " % (stream_id, mid)).ljust(size, b"x")


async def start_worker(transport: str, sink: MemorySink, certs) -> tuple[WorkerServer, list[str]]:
    """The worker and the URL arguments aqueduct-produce needs for it."""
    if transport == "tcp":
        server = await serve_tcp("127.0.0.1", 0, sink)
        return server, [f"tcp://127.0.0.1:{server.port}"]
    from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct

    server = await serve_aqueduct(
        "127.0.0.1", 0, sink, certfile=certs.server_cert, keyfile=certs.server_key
    )
    return server, [f"aqueduct://127.0.0.1:{server.port}", "--cafile", str(certs.ca)]


@pytest.mark.parametrize("transport", ["tcp", "aqueduct"])
async def test_killed_producer_resumes_exactly_once(
    transport: str, rng: random.Random, figures: Figures, tmp_path: Path, certs
) -> None:
    messages, kill_after = SIZES[transport]
    sink = MemorySink()
    server, url = await start_worker(transport, sink, certs)
    argv = [
        *console_script("aqueduct-produce"),
        *url,
        "--program", PROGRAM, "--instance", INSTANCE,
        "--count", str(messages), "--streams", str(STREAMS), "--first-stream-id", "0",
        "--payload-size", "40", "--rate", str(RATE), "--json", "--quiet",
    ]  # fmt: skip
    child = Child(argv, tmp_path / "produce.log")
    kill_at = [rng.randint(*kill_after) for _ in range(KILLS)]
    progress_at_kill: list[int] = []

    def in_sink() -> int:
        return sum(len(sink.messages(PROGRAM, INSTANCE, s)) for s in range(STREAMS))

    try:
        for more in kill_at:
            target = in_sink() + more
            await child.start()
            await asyncio.wait_for(sink.wait_for(lambda t=target: in_sink() >= t), TIMEOUT)
            await child.kill()
            progress_at_kill.append(in_sink())
        before = child.log.stat().st_size
        await child.start()
        status = await child.wait(TIMEOUT)
    finally:
        await child.kill()
        await server.close()
    summary = json.loads(child.log.read_bytes()[before:].decode().strip().splitlines()[-1])

    delivered = [(s, m.message_id, m.payload) for s in range(STREAMS) for m in sink.messages(PROGRAM, INSTANCE, s)]
    t = tally({s: {m: payload(s, m) for m in range(messages)} for s in range(STREAMS)}, delivered)
    figures.count(t)
    figures.faults = {"sigkill": child.kills, "kill_after_messages": kill_at}
    figures.extra = {
        "transport": transport,
        "in_sink_at_each_kill": progress_at_kill,
        "last_run": summary,
    }

    assert status == 0, child.output()[-2000:]
    assert summary["errors"] == []
    assert child.kills == KILLS
    assert t.exactly_once, t
    for s in range(STREAMS):
        assert [m.message_id for m in sink.messages(PROGRAM, INSTANCE, s)] == list(range(messages))  # in order
    # The kills really interrupted the stream: some progress before the last run, not all.
    assert 0 < progress_at_kill[-1] < STREAMS * messages
