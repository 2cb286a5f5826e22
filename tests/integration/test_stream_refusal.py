"""A stream outside a producer's grant is refused alone; its other streams go on (issue 38).

A real ingest behind real listeners (TCP, TLS over TCP, QUIC on each
server and client backend) admitting by tokens. A producer granted
``orders-*`` opens four streams, two of them outside its grant, and
sends on all four. The bridge refuses each outside stream with the ERROR
``stream N refused: RULE``; the producer gives that stream up (its records
fail with the rule, its sends raise it), comes back at once and goes on:
the allowed streams are stored exactly once and acked, nothing of the
refused ones reaches the log, and each refusal costs one session, never
more (a refused stream is never notified again).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

from aqueduct.auth import decode_token
from aqueduct.connector.errors import StreamRefused
from aqueduct.connector.frames import (
    PROTOCOL_VERSION,
    Ack,
    Error,
    FrameSplitter,
    Hello,
    Notify,
    Ok,
    encode,
)
from aqueduct.connector.producer.client import Connector, Delivery
from aqueduct.runtime.certs import CertPaths
from tests.integration.test_ingest_credentials import TIMEOUT, Bridge, guarded_bridge, token
from tests.stored import stored

ALLOWED = {1: "orders-1", 3: "orders-3"}
OUTSIDE = {2: "billing-2", 4: "billing-4"}
STREAMS = dict(sorted({**ALLOWED, **OUTSIDE}.items()))
RECORDS = 40


async def _send(stream, records: range) -> int:
    """Send ``records`` on ``stream`` until it is refused; return how many went out."""
    sent = 0
    for i in records:
        try:
            await stream.send(b"%d:%d" % (stream.stream_id, i))
        except StreamRefused:
            break
        sent += 1
    return sent


async def _a_producer_with_streams_outside_its_grant(bridge: Bridge, **options: object) -> None:
    grant = token("orders", streams=("orders-*",))
    rule = "stream_not_allowed: stream '{name}' (id {sid}) is not in streams orders-* of token {tid} (subject 'orders')"
    expected = {
        sid: rule.format(name=name, sid=sid, tid=decode_token(grant).token_id) for sid, name in OUTSIDE.items()
    }
    reports: list[tuple[Exception | None, Delivery]] = []
    conn: Connector = bridge.connector(grant, "orders", on_delivery=lambda e, d: reports.append((e, d)), **options)
    async with conn:
        streams = [await conn.stream(sid, name) for sid, name in STREAMS.items()]
        counts = await asyncio.gather(*(_send(s, range(RECORDS)) for s in streams))
        sent = dict(zip(STREAMS, counts, strict=True))
        with pytest.raises(StreamRefused) as raised:  # once every allowed record is committed
            await conn.wait_all_acked(TIMEOUT)
        assert raised.value.stream_id in OUTSIDE and raised.value.reason == expected[raised.value.stream_id]
        for s in streams:
            if s.stream_id in OUTSIDE:
                with pytest.raises(StreamRefused, match=f"^{re.escape(expected[s.stream_id])}$"):
                    await s.send(b"after the refusal")
                with pytest.raises(StreamRefused):
                    await s.wait_acked(1, TIMEOUT)
            else:
                assert s.acked == RECORDS and sent[s.stream_id] == RECORDS
        assert {sid: r.reason for sid, r in conn.refused.items()} == expected
        assert conn.stats.connections == 1 + len(OUTSIDE)  # one session per refusal, none more
        with pytest.raises(StreamRefused):
            await conn.stream(2, "billing-2")  # given up for good on this connector
    for sid in ALLOWED:
        assert stored(bridge.log, sid) == [(i, b"%d:%d" % (sid, i)) for i in range(RECORDS)]
    assert set(bridge.log.stream_ids()) == set(ALLOWED)  # nothing of a refused stream reached the log
    assert bridge.ingest.counters.refusals["stream_not_allowed"] == len(OUTSIDE)
    assert bridge.ingest.counters.sessions_started == 1 + len(OUTSIDE)
    # Every record handed over is reported once: the allowed ones committed, the refused ones with their rule.
    assert sorted((d.stream_id, d.message_id) for e, d in reports if e is None) == [
        (sid, i) for sid in sorted(ALLOWED) for i in range(RECORDS)
    ]
    failed = [(d.stream_id, d.message_id, e) for e, d in reports if e is not None]
    assert all(isinstance(e, StreamRefused) and str(e) == expected[sid] for sid, _, e in failed)
    assert sorted((sid, mid) for sid, mid, _ in failed) == [(sid, i) for sid in sorted(OUTSIDE) for i in range(sent[sid])]


@pytest.mark.parametrize("transport", ["tcp", "tls"])
async def test_a_refused_stream_is_given_up_alone_over_tcp(tmp_path: Path, certs: CertPaths, transport: str) -> None:
    async with guarded_bridge(tmp_path, transport, certs) as bridge:
        await _a_producer_with_streams_outside_its_grant(bridge)


async def test_a_refused_stream_is_given_up_alone_over_quic(
    tmp_path: Path, certs: CertPaths, server_backend: str, client_backend: str
) -> None:
    async with guarded_bridge(tmp_path, "quic", certs, server_backend) as bridge:
        await _a_producer_with_streams_outside_its_grant(bridge, quic_backend=client_backend)


async def test_aqueduct_produce_names_the_refused_stream_and_its_rule_and_sends_the_others(
    tmp_path: Path, certs: CertPaths
) -> None:
    grant = token("produce", programs=("produce/*",), streams=("produce/0",))
    (tmp_path / "token").write_text(grant + "\n")
    async with guarded_bridge(tmp_path, "tcp") as bridge:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "aqueduct.connector.producer.cli", bridge.url, "--token-file", str(tmp_path / "token"),
            "--program", "produce", "--instance", "p0", "--count", "25", "--streams", "2", "--first-stream-id", "10",
            "--json", "--quiet", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT * 2)
        stored_10 = stored(bridge.log, 10)
        ids = set(bridge.log.stream_ids())
    rule = (
        f"stream_not_allowed: stream 'produce/1' (id 11) is not in streams produce/0 of token "
        f"{decode_token(grant).token_id} (subject 'produce')"
    )
    assert proc.returncode == 1
    assert err.decode().splitlines() == [f"aqueduct-produce: refused: {rule}"]
    summary = json.loads(out)
    assert (summary["refused"], summary["errors"], summary["acked"]) == (rule, [f"refused: {rule}"], 25)
    assert stored_10 == [(i, b"10:%d " % i + b"x" * (100 - len(b"10:%d " % i))) for i in range(25)]
    assert ids == {10}


async def test_with_replicas_each_connection_gives_the_refused_stream_up_and_goes_on(tmp_path: Path) -> None:
    """Both bridges refuse the stream, each over its own connection; the connector gives it up once."""
    grant = token("orders", streams=("orders-*",))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with guarded_bridge(tmp_path / "a", "tcp") as a, guarded_bridge(tmp_path / "b", "tcp") as b:
        async with Connector([a.url, b.url], program="orders", instance="p0", token=grant, replicas=2) as conn:
            kept, outside = await conn.stream(1, "orders-1"), await conn.stream(2, "billing-2")
            await _send(outside, range(5))
            for i in range(RECORDS):
                await kept.send(b"%d" % i)
            with pytest.raises(StreamRefused, match="^stream_not_allowed: stream 'billing-2' "):
                await conn.wait_all_acked(TIMEOUT)
            assert kept.acked == RECORDS and list(conn.refused) == [2]
        for bridge in (a, b):  # a record is done when either bridge acks it: the other may still lag
            assert set(bridge.log.stream_ids()) <= {1}
        # at most one refusal per connection (one that came up after the other's refusal never notified it)
        assert 1 <= a.ingest.counters.refusals["stream_not_allowed"] + b.ingest.counters.refusals["stream_not_allowed"] <= 2
        assert a.ingest.counters.refusals["stream_not_allowed"] <= 1 and b.ingest.counters.refusals["stream_not_allowed"] <= 1


async def test_on_the_wire_the_refusal_is_one_error_naming_the_stream_and_its_rule(tmp_path: Path) -> None:
    """What any connector reads, this library's or an older one's: ERROR ``stream N refused: RULE``, then the end."""
    grant = token("orders", streams=("orders-*",))
    async with guarded_bridge(tmp_path, "tcp") as bridge:
        host, port = bridge.url.removeprefix("tcp://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(encode(Hello(PROTOCOL_VERSION, grant.encode(), "orders", "p0")) + encode(Notify(9, "billing-9", 0)))
            data = await asyncio.wait_for(reader.read(), TIMEOUT)  # until the bridge closes the connection
        finally:
            writer.close()
    splitter = FrameSplitter()
    splitter.push(data)
    frames, bad = splitter.drain()
    assert bad is None and isinstance(frames[0], Ok)
    assert all(isinstance(f, Ack) for f in frames[1:-1])  # the NOTIFY's credit may come back first
    assert frames[-1:] == [Error(
        f"stream 9 refused: stream_not_allowed: stream 'billing-9' (id 9) is not in streams orders-* of token "
        f"{decode_token(grant).token_id} (subject 'orders')"
    )]  # fmt: skip
