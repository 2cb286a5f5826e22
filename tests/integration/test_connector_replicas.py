"""``replicas=2``: every stream sent to two bridges at once, a record done when either acks it.

In-process workers on loopback (the connector's real TCP listener with the
in-memory sink, which acks at once unless told not to). A real bridge
process killed under load is in ``test_connector_failover.py``.
"""

from __future__ import annotations

import pytest

from aqueduct.connector.producer.client import Connector, Delivery
from aqueduct.connector.worker.memory_sink import MemorySink
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig
from tests.waiting import wait_until

TIMEOUT = 30.0  # only turns a hang into a failure


def ids(sink: MemorySink) -> list[int | None]:
    return [m.message_id for m in sink.messages("p", "i", 1)]


async def test_every_record_goes_to_both_bridges_and_is_reported_once() -> None:
    sinks = [MemorySink(), MemorySink()]
    servers = [await serve_tcp("127.0.0.1", 0, sink) for sink in sinks]
    urls = [f"tcp://127.0.0.1:{s.port}" for s in servers]
    reports: list[tuple[Exception | None, Delivery]] = []
    try:
        async with Connector(urls, program="p", instance="i", replicas=2,
                             on_delivery=lambda e, d: reports.append((e, d))) as conn:  # fmt: skip
            stream = await conn.stream(1, "s")
            await stream.send_many([b"%d" % i for i in range(100)])
            await conn.wait_all_acked(TIMEOUT)
            await wait_until(lambda: all(len(ids(s)) == 100 for s in sinks), "both bridges' copies", TIMEOUT)
            assert conn.serving == tuple(urls) and conn.bridge == urls[0]
        assert all(ids(s) == list(range(100)) for s in sinks)  # each bridge: every record, once
        assert sorted(d.message_id for _, d in reports) == list(range(100)) and all(e is None for e, _ in reports)
    finally:
        for server in servers:
            await server.close()


async def test_a_lost_bridge_holds_nothing_back_the_other_acks_everything() -> None:
    sinks = [MemorySink(), MemorySink()]
    servers = [await serve_tcp("127.0.0.1", 0, sink) for sink in sinks]
    urls = [f"tcp://127.0.0.1:{s.port}" for s in servers]
    try:
        async with Connector(urls, program="p", instance="i", replicas=2, move_after=60.0) as conn:
            stream = await conn.stream(1, "s")
            await stream.send_many([b"%d" % i for i in range(50)])
            await conn.wait_all_acked(TIMEOUT)
            await servers[0].close()  # lost: its connection retries it, the other goes on
            await wait_until(lambda: conn.stats.retries >= 1, "a failed attempt on the lost bridge", TIMEOUT)
            await stream.send_many([b"%d" % i for i in range(50, 100)])
            await conn.wait_all_acked(TIMEOUT)  # without the lost bridge, without moving (move_after 60 s)
            assert conn.stats.moves == 0 and stream.acked == 100
        assert ids(sinks[1]) == list(range(100)) and ids(sinks[0]) == list(range(50))
    finally:
        for server in servers:
            await server.close()


async def test_a_connection_far_behind_is_reconnected_to_catch_up_from_what_is_unacked() -> None:
    fast, slow = MemorySink(), MemorySink(auto_ack=False)  # the slow one never acks: its credits run out
    servers = [await serve_tcp("127.0.0.1", 0, fast), await serve_tcp("127.0.0.1", 0, slow, WorkerConfig(initial_credits=4))]
    urls = [f"tcp://127.0.0.1:{s.port}" for s in servers]
    try:
        async with Connector(urls, program="p", instance="i", replicas=2, max_buffer=20) as conn:
            stream = await conn.stream(1, "s")
            for first in range(0, 200, 10):
                await stream.send_many([b"%d" % i for i in range(first, first + 10)])
            await conn.wait_all_acked(TIMEOUT)
            assert any(e == "reconnecting: more than max_buffer (20) frames behind" for e in conn.stats.errors)
        assert ids(fast) == list(range(200))
    finally:
        for server in servers:
            await server.close()


@pytest.mark.parametrize(
    ("urls", "replicas", "error"),
    [
        ("tcp://a:1", 2, "replicas must be 1 to the number of bridges (1 bridge given), got 2"),
        ("tcp://a:1,tcp://b:2", 0, "replicas must be 1 to the number of bridges (2 bridges given), got 0"),
    ],
)
def test_replicas_must_fit_the_bridges(urls: str, replicas: int, error: str) -> None:
    with pytest.raises(ValueError) as refused:
        Connector(urls, replicas=replicas)
    assert str(refused.value) == error
