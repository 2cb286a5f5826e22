"""A bridge SIGKILLed under a connected fleet and restarted on its log: every producer is back, exactly once.

The fleet benchmark's storm mode (``bench.fleet --storm``) in a small
configuration: a real bridge process (listener, ingest, durable log), 60
producers in two processes sending paced records all along; once every
producer is acked, the bridge is SIGKILLed and a new one started on the same
log and port. Every producer must be acked by the new bridge, and at the end
the log, read back, must hold each producer's records exactly once with the
bytes it sent. No timing is asserted; the timeouts only prevent hangs.

Over QUIC with the aioquic bridge, every producer must also have learned
that its connection was gone from the new bridge's stateless reset, not
from its own idle timeout (the cause, not the time it saved).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bench.fleet import build_parser, main_async
from interop.netns import isolated_loopback
from tests.conftest import PICOQUIC_SERVER_OUTSIDE_NAMESPACE, picoquic_missing

PRODUCERS = 60
HANG_GUARD = 300.0  # seconds; a healthy run takes well under a minute


async def storm(transport: str, backend: str = "aioquic") -> dict[str, Any]:
    args = build_parser().parse_args([
        "--storm", "--producers", str(PRODUCERS), "--transports", transport, "--quic-backend", backend,
        "--procs", "2", "--repeat", "1", "--settle", "0.5", "--rate", "5", "--limit", str(HANG_GUARD / 3),
        "--quiet",
    ])  # fmt: skip
    (result,) = await asyncio.wait_for(main_async(args), HANG_GUARD)
    return result


def assert_every_producer_back_exactly_once(result: dict[str, Any]) -> None:
    [kill] = result["storms"]
    assert kill["producers_back"] == PRODUCERS and result["every_producer_back"]
    assert result["errors"] == []
    # every producer sent after the restart too, and the log holds each record once, with its bytes
    assert result["streams"] == PRODUCERS and result["records"] > PRODUCERS
    assert result["exactly_once_bad_count"] == 0 and result["exactly_once"]


@pytest.mark.parametrize("transport", ["quic", "tcp"])
async def test_a_killed_bridge_gets_every_producer_back_exactly_once(transport: str) -> None:
    result = await storm(transport)
    assert_every_producer_back_exactly_once(result)
    if transport == "quic":
        assert result["lost_by"] == {"stateless reset": PRODUCERS}


@pytest.mark.picoquic_server
async def test_a_killed_picoquic_bridge_gets_every_producer_back_exactly_once() -> None:
    if why := picoquic_missing():
        pytest.skip(why)
    if not isolated_loopback():
        pytest.skip(PICOQUIC_SERVER_OUTSIDE_NAMESPACE)
    assert_every_producer_back_exactly_once(await storm("quic", "picoquic"))
