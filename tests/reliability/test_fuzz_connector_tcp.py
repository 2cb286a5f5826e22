"""Decoder fuzz against a live connector worker over TCP.

A real worker (``serve_tcp`` + ``MemorySink``) runs in this process. A
well-behaved connector streams messages to it the whole time, while a few
hundred seeded hostile connections send a valid HELLO followed by mutated
valid frames (some mutate the HELLO too). For every hostile input the
worker must answer exactly as the sans-IO ``WorkerSession`` says it should
(the same ERROR reason, or no ERROR if the bytes are acceptable) and then
close; none of it may crash a server task or disturb the good connection,
whose messages must all arrive once, intact and acked.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from aqueduct.connector.frames import (
    BOUNDARY,
    EOS,
    EPHEMERAL,
    EVENT_TIME,
    KEY,
    PROTOCOL_VERSION,
    UNSTABLE_REFERENCE,
    Ack,
    ConnectorFrameError,
    ConnectorMessage,
    Error,
    Frame,
    FrameSplitter,
    Hello,
    Notify,
    Ok,
    Restart,
    encode,
)
from aqueduct.connector.producer.client import Connector
from aqueduct.connector.worker.memory_sink import MemorySink
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig, WorkerSession
from tests.reliability.faults import Figures, Mutator, tally

pytestmark = pytest.mark.slow  # part of make test; seconds, not minutes

INPUTS = 300
CONCURRENCY = 16
TIMEOUT = 20.0  # per hostile connection: only turns a hang into a failure
GOOD = ("well-behaved-producer", "steady-0")


def valid_tails(rng: random.Random) -> list[bytes]:
    """Valid frame sequences a connector may send after HELLO (the fuzz seeds)."""
    notify = encode(Notify(1, "fuzz/1", 0))
    plain = b"".join(encode(ConnectorMessage(0, 1, i, payload=rng.randbytes(rng.randint(0, 40)))) for i in range(3))
    rich = encode(
        ConnectorMessage(KEY | EVENT_TIME, 1, 0, event_time=1_700_000_000_000_000, key=b"k", payload=b"v")
    )
    return [
        notify,
        notify + plain,
        notify + rich,
        notify + encode(ConnectorMessage(BOUNDARY, 1, 0, payload=None)),
        notify + encode(ConnectorMessage(EPHEMERAL, 1, None, payload=b"e")),
        notify + encode(ConnectorMessage(UNSTABLE_REFERENCE | EOS, 1, 5, payload=b"u")),
        notify + plain + encode(Error("producer gave up")),
        encode(Notify(2, "fuzz/2", 7)) + encode(ConnectorMessage(0, 2, 7, payload=b"x" * 300)),
    ]


def misdirected() -> list[bytes]:
    """Well-formed frames a worker must never receive: splice material."""
    return [encode(f) for f in (Ack(1, ((1, 2),)), Ok(3), Restart())]


def expected_error(data: bytes, sink: MemorySink, config: WorkerConfig) -> str | None:
    """The ERROR reason the sans-IO worker session gives for ``data`` (None: accepted)."""
    session = WorkerSession(config, sink.durable_streams)
    session.receive_data(data)
    errors = [f for f in FrameSplitter().feed(session.data_to_send()) if isinstance(f, Error)]
    return errors[0].reason if errors else None


def decoder_error(data: bytes) -> str | None:
    try:
        FrameSplitter().feed(data)
    except ConnectorFrameError as exc:
        return str(exc)
    return None


async def probe(port: int, data: bytes) -> list[Frame]:
    """Send ``data``, half-close, and read what the worker says until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        writer.write_eof()
        received = await asyncio.wait_for(reader.read(), TIMEOUT)  # until EOF
    finally:
        writer.close()
    return FrameSplitter().feed(received)


async def steady_producer(url: str, stop: asyncio.Event) -> int:
    """Stream messages until ``stop`` (at least 500); return how many, all acked."""
    sent = 0
    async with Connector(url, program=GOOD[0], instance=GOOD[1]) as conn:
        stream = await conn.stream(1, "steady")
        while (not stop.is_set() or sent < 500) and sent < 200_000:
            await stream.send(b"steady-%d" % sent)
            sent += 1
            if sent % 25 == 0:
                await asyncio.sleep(0.002)  # let the fuzz connections interleave
        await asyncio.wait_for(stream.wait_acked(sent), TIMEOUT)
    return sent


async def test_worker_survives_mutated_frames_and_keeps_serving(
    rng: random.Random, figures: Figures, loop_errors: list
) -> None:
    config = WorkerConfig()
    sink = MemorySink()
    server = await serve_tcp("127.0.0.1", 0, sink, config)
    url = f"tcp://127.0.0.1:{server.port}"
    tails = valid_tails(rng)
    mutator = Mutator(rng, corpus=tails + misdirected())
    stop = asyncio.Event()
    outcomes = {"error_decode": 0, "error_session": 0, "accepted": 0}
    kinds: dict[str, int] = {}
    mismatches: list[tuple[int, str, str | None, str | None]] = []

    async def one(i: int, data: bytes, kind: str) -> None:
        expected = expected_error(data, sink, config)
        frames = await probe(server.port, data)
        errors = [f.reason for f in frames if isinstance(f, Error)]
        got = errors[0] if errors else None
        if got != expected or (errors and frames[-1] != Error(got)):
            mismatches.append((i, kind, expected, got))
        elif got is None:
            outcomes["accepted"] += 1
        else:
            outcomes["error_decode" if got == decoder_error(data) else "error_session"] += 1

    try:
        producer = asyncio.create_task(steady_producer(url, stop))
        gate = asyncio.Semaphore(CONCURRENCY)

        async def bounded(i: int) -> None:
            hello = encode(Hello(PROTOCOL_VERSION, b"", "fuzz", f"fuzz-{i}"))
            start = 0 if rng.random() < 0.2 else len(hello)  # mostly: valid handshake, bad tail
            kind, data = mutator.mutate(hello + rng.choice(tails), start)
            kinds[kind] = kinds.get(kind, 0) + 1
            async with gate:
                await one(i, data, kind)

        await asyncio.gather(*(bounded(i) for i in range(INPUTS)))
        stop.set()
        sent = await asyncio.wait_for(producer, 4 * TIMEOUT)

        # A connector arriving after the storm is served like any other.
        async with Connector(url, program="after", instance="a0") as conn:
            stream = await conn.stream(1, "after")
            for i in range(10):
                await stream.send(b"after-%d" % i)
            await asyncio.wait_for(stream.wait_acked(10), TIMEOUT)
    finally:
        await server.close()

    delivered = sink.messages(*GOOD, 1)
    figures.count(tally({1: {i: b"steady-%d" % i for i in range(sent)}}, ((1, m.message_id, m.payload) for m in delivered)))
    figures.faults = {"hostile_inputs": INPUTS, "mutations": kinds}
    figures.extra = {**outcomes, "mismatches": len(mismatches), "loop_errors": len(loop_errors)}

    assert not mismatches, f"worker answer differs from the session's: {mismatches[:5]}"
    assert not loop_errors, loop_errors[:3]
    assert figures.lost == 0 and figures.duplicates == 0 and figures.in_sink == sent
    assert [m.payload for m in delivered] == [b"steady-%d" % i for i in range(sent)]
    assert sink.payloads("after", "a0", 1) == [b"after-%d" % i for i in range(10)]
    assert outcomes["error_decode"] > INPUTS // 4  # the fuzz really reached the decoder
