"""A refused stream over QUIC: the producer gets the ERROR, nothing else breaks.

A producer whose NOTIFYs share a payload (its streams announced together)
sees the first refusal end its session (the seed protocol has no
per-stream answer: the ERROR ``stream N refused: ...`` names the stream,
and the producer comes back without it); the NOTIFYs after it in the same
payload used to reach the ingest for a session it had already forgotten,
and the task died with a ``KeyError`` ("Task exception was never retrieved").
"""

from __future__ import annotations

import asyncio
import gc

import pytest

from aqueduct.bridge.ingest.service import Ingest
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.errors import StreamRefused
from aqueduct.connector.producer.client import Connector
from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct
from tests.ingest_stop import stop_ingest
from tests.waiting import wait_until

TIMEOUT = 30.0


async def test_a_refused_multi_stream_quic_producer_gets_its_error_and_others_are_intact(tmp_path, certs) -> None:
    loop = asyncio.get_running_loop()
    problems: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: problems.append(context))
    log = DurableLog(tmp_path / "log")
    ingest = Ingest(log)
    commits = asyncio.create_task(ingest.run())
    server = await serve_aqueduct("127.0.0.1", 0, ingest, certfile=certs.server_cert, keyfile=certs.server_key)
    url = f"aqueduct://127.0.0.1:{server.port}"
    try:
        async with Connector(url, program="a", instance="1", cafile=certs.ca) as owner:
            mine = await owner.stream(5, "owned")
            for i in range(20):
                await mine.send(b"a%d" % i)
            intruder = Connector(url, program="b", instance="1", cafile=certs.ca)
            async with intruder:
                taken, other, _ = await asyncio.gather(*(intruder.stream(sid, f"s{sid}") for sid in (5, 6, 7)))
                await other.send(b"its own stream goes on")
                with pytest.raises(StreamRefused, match=r"^stream 5 belongs to connector 'a/1', not 'b/1'$"):
                    await taken.wait_acked(1, TIMEOUT)  # the refusal arrives meanwhile
                await wait_until(lambda: 6 in log.stream_ids() and log.durable_end(6) == 1, "its own stream", TIMEOUT)
            for i in range(20, 40):  # the owner's session never noticed
                await mine.send(b"a%d" % i)
            for _ in range(int(TIMEOUT / 0.02)):  # bounded poll: all 40 durable
                if log.durable_end(5) == 40:
                    break
                await asyncio.sleep(0.02)
    finally:
        await stop_ingest(server, commits, log)
    gc.collect()  # "Task exception was never retrieved" is reported when the task is collected
    await asyncio.sleep(0)
    assert problems == []
    with DurableLog(tmp_path / "log") as reopened:
        assert reopened.durable_end(5) == 40
        assert reopened.connector_of(5) == "a/1"
        assert reopened.connector_of(6) == "b/1"
