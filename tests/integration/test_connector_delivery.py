"""The producer API operators reach for: delivery reports, flush, a blocking client, giving up on permanent errors.

Real workers over loopback: the bridge's ingest (durable log, acks on Spark's
commit, here called by the test) over TCP, and the memory worker over QUIC.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aqueduct.bridge.ingest.service import Ingest
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.errors import ConnectorClosed, ConnectorRefused, TlsRefused
from aqueduct.connector.producer.blocking import Producer
from aqueduct.connector.producer.client import Connector, Delivery
from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct
from aqueduct.connector.worker.memory_sink import MemorySink
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig
from aqueduct.runtime.certs import generate_certs
from tests.ingest_stop import stop_ingest

TIMEOUT = 30.0  # only turns a hang into a failure
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "blocking_producer.py"


class Reports:
    """Delivery reports as a list of (error or None, stream id, message id)."""

    def __init__(self) -> None:
        self.seen: list[tuple[Exception | None, int, int]] = []

    def __call__(self, error: Exception | None, delivery: Delivery) -> None:
        self.seen.append((error, delivery.stream_id, delivery.message_id))

    def ids(self, ok: bool = True) -> list[tuple[int, int]]:
        return [(sid, mid) for error, sid, mid in self.seen if (error is None) == ok]


@pytest.fixture
async def bridge_ingest(tmp_path: Path) -> AsyncIterator[tuple[Ingest, str]]:
    """The bridge's ingest over TCP (no Spark: the test says when a batch is committed)."""
    log = DurableLog(tmp_path / "log")
    ingest = Ingest(log)
    commits = asyncio.create_task(ingest.run())
    server = await serve_tcp("127.0.0.1", 0, ingest)
    try:
        yield ingest, f"tcp://127.0.0.1:{server.port}"
    finally:
        await stop_ingest(server, commits, log)


async def _durable(ingest: Ingest, stream_id: int, records: int) -> None:
    for _ in range(int(TIMEOUT / 0.01)):  # bounded poll
        if stream_id in ingest.log.stream_ids() and ingest.log.complete_offset(stream_id) >= records:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"stream {stream_id} never held {records} durable records")


async def test_every_committed_record_gets_its_report_and_flush_says_what_is_left(bridge_ingest) -> None:
    ingest, url = bridge_ingest
    reports = Reports()
    async with Connector(url, program="p", instance="i", on_delivery=reports) as conn:
        a, b = await conn.stream(1, "a"), await conn.stream(2, "b")
        await a.send_many([b"a%d" % i for i in range(6)])
        for i in range(4):
            await b.send(b"b%d" % i)
        await _durable(ingest, 1, 6)
        await _durable(ingest, 2, 4)
        assert await conn.flush(0) == 10 and reports.seen == []  # durable, not committed
        ingest.on_committed({1: 3})  # Spark committed a batch holding a0..a2
        await a.wait_acked(3, TIMEOUT)
        assert await conn.flush(0) == 7 and reports.ids() == [(1, 0), (1, 1), (1, 2)]
        ingest.on_committed({1: 6, 2: 4})
        assert await conn.flush(TIMEOUT) == 0
    assert reports.ids() == [(1, 0), (1, 1), (1, 2), (1, 3), (1, 4), (1, 5), (2, 0), (2, 1), (2, 2), (2, 3)]
    assert reports.ids(ok=False) == []


async def test_records_left_unacked_at_close_are_reported_with_the_error() -> None:
    sink = MemorySink(auto_ack=False)  # durable, never committed
    server = await serve_tcp("127.0.0.1", 0, sink)
    reports = Reports()
    try:
        conn = Connector(f"tcp://127.0.0.1:{server.port}", program="p", instance="i", on_delivery=reports)
        await conn.connect()
        stream = await conn.stream(7, "s")
        for i in range(5):
            await stream.send(b"%d" % i)
        await sink.wait_for(lambda: len(sink.payloads("p", "i", 7)) == 5, TIMEOUT)
        assert await conn.flush(0) == 5
        await conn.close(flush_timeout=0)
        assert [(type(e), sid, mid) for e, sid, mid in reports.seen] == [(ConnectorClosed, 7, i) for i in range(5)]
        assert await conn.flush(0) == 5  # still not committed; no second report
        assert len(reports.seen) == 5
    finally:
        await server.close()


async def test_a_refusal_reports_what_it_leaves_with_its_reason(bridge_ingest) -> None:
    """A stream that belongs to another connector: given up at once, and every waiting record learns why."""
    ingest, url = bridge_ingest
    async with Connector(url, program="owner", instance="0") as owner:
        await (await owner.stream(3, "taken")).send(b"x")
        await owner.flush(0)
        await _durable(ingest, 3, 1)
    reports = Reports()
    intruder = Connector(url, program="other", instance="0", on_delivery=reports)
    await intruder.connect()
    try:
        stream = await intruder.stream(3, "taken")
        with contextlib.suppress(ConnectorRefused):  # the refusal may come back before the send
            await stream.send(b"y")
        with pytest.raises(ConnectorRefused, match="^stream 3 belongs to connector 'owner/0', not 'other/0'$"):
            await intruder.flush(TIMEOUT)
    finally:
        await intruder.close()
    errors = {str(e) for e, _, _ in reports.seen}
    assert len(errors) <= 1 and all(e == "stream 3 belongs to connector 'owner/0', not 'other/0'" for e in errors)
    assert reports.ids() == []


# ---------------------------------------------------------------- QUIC: certificates


@pytest.fixture
async def quic_worker(tmp_path: Path) -> AsyncIterator[tuple[MemorySink, str, Path, Path]]:
    """A memory worker over QUIC; yields (sink, url, its CA, another CA)."""
    ours, theirs = generate_certs(tmp_path / "ours"), generate_certs(tmp_path / "theirs")
    sink = MemorySink()
    server = await serve_aqueduct(
        "127.0.0.1", 0, sink, WorkerConfig(cookie=b"secret"), certfile=ours.server_cert, keyfile=ours.server_key
    )
    try:
        yield sink, f"aqueduct://127.0.0.1:{server.port}", ours.ca, theirs.ca
    finally:
        await server.close()


async def test_a_certificate_that_does_not_verify_is_final_at_once(quic_worker) -> None:
    _, url, _, wrong_ca = quic_worker
    conn = Connector(url, cookie="secret", cafile=str(wrong_ca), connect_timeout=TIMEOUT)
    with pytest.raises(TlsRefused, match=r"^TLS handshake with 127\.0\.0\.1:\d+ failed: the server's certificate "
                       + r"\(CN=.*\) is not signed by a CA in cafile .*theirs/ca\.pem"):  # fmt: skip
        await conn.connect()
    assert conn.stats.retries == 0


async def test_a_missing_cafile_is_refused_when_the_connector_is_made(quic_worker, tmp_path: Path) -> None:
    _, url, _, _ = quic_worker
    with pytest.raises(FileNotFoundError, match="^cafile '.*nowhere.pem': no such file$"):
        Connector(url, cafile=str(tmp_path / "nowhere.pem"))


async def test_permanent_errors_are_retried_when_asked(quic_worker) -> None:
    _, url, ca, wrong_ca = quic_worker
    # connect_timeout leaves room for a whole failed attempt on a loaded machine (the message names the last error)
    for cafile, cookie, last in ((wrong_ca, "secret", "TLS handshake"), (ca, "nope", "bad cookie")):
        conn = Connector(url, cookie=cookie, cafile=str(cafile), connect_timeout=4.0, backoff=(0.01, 0.05),
                         retry_permanent_errors=True)  # fmt: skip
        with pytest.raises(ConnectionError, match=f"no handshake with .* within 4.0 s .*{last}"):
            await conn.connect()
        assert conn.stats.retries >= 1


# ---------------------------------------------------------------- the blocking Producer


def test_blocking_producer_shared_by_threads(tmp_path: Path) -> None:
    certs = generate_certs(tmp_path / "certs")
    loop = asyncio.new_event_loop()
    worker = threading.Thread(target=loop.run_forever, daemon=True)
    worker.start()
    sink = MemorySink()
    server = asyncio.run_coroutine_threadsafe(
        serve_aqueduct("127.0.0.1", 0, sink, certfile=certs.server_cert, keyfile=certs.server_key), loop
    ).result(TIMEOUT)
    lock = threading.Lock()
    reports = Reports()
    misuse: list[BaseException] = []

    def on_delivery(error: Exception | None, delivery: Delivery) -> None:
        with lock:
            reports(error, delivery)
        if len(reports.seen) == 1:
            try:
                producer.produce(0, b"from the callback")
            except RuntimeError as exc:
                misuse.append(exc)

    try:
        with Producer(f"aqueduct://127.0.0.1:{server.port}", program="p", instance="i", cafile=str(certs.ca),
                      on_delivery=on_delivery, connect_timeout=TIMEOUT) as producer:  # fmt: skip
            for sid in range(3):
                assert producer.open_stream(sid, f"s{sid}") == 0

            def write(sid: int) -> None:
                for i in range(50):
                    producer.produce(sid, b"%d-%d" % (sid, i))
                producer.produce_many(sid, [b"bulk"] * 10)

            threads = [threading.Thread(target=write, args=(sid,)) for sid in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(TIMEOUT)
            assert producer.flush(TIMEOUT) == 0 and producer.unacked == 0
            with pytest.raises(KeyError, match="stream 9 is not open"):
                producer.produce(9, b"x")
        assert sorted(reports.ids()) == [(sid, i) for sid in range(3) for i in range(60)]
        assert [str(e) for e in misuse] == [
            "a Producer cannot be called from its own thread (e.g. from on_delivery)"
        ]
        for sid in range(3):
            assert sink.payloads("p", "i", sid)[:50] == [b"%d-%d" % (sid, i) for i in range(50)]
        with pytest.raises(RuntimeError, match="the Producer is closed"):
            producer.produce(0, b"late")
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(TIMEOUT)
        loop.call_soon_threadsafe(loop.stop)
        worker.join(TIMEOUT)


def test_blocking_producer_refused_at_connect(tmp_path: Path) -> None:
    """A bad cookie raises from the constructor, and the producer's thread is gone."""
    loop = asyncio.new_event_loop()
    worker = threading.Thread(target=loop.run_forever, daemon=True)
    worker.start()
    server = asyncio.run_coroutine_threadsafe(
        serve_tcp("127.0.0.1", 0, MemorySink(), WorkerConfig(cookie=b"secret")), loop
    ).result(TIMEOUT)
    before = threading.active_count()
    try:
        with pytest.raises(ConnectorRefused, match="^bad cookie$"):
            Producer(f"tcp://127.0.0.1:{server.port}", cookie="nope", connect_timeout=TIMEOUT)
        assert threading.active_count() == before
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(TIMEOUT)
        loop.call_soon_threadsafe(loop.stop)
        worker.join(TIMEOUT)


async def test_the_blocking_example_runs_against_a_bridge_ingest(bridge_ingest) -> None:
    """``examples/blocking_producer.py`` as documented, acked as Spark would (commit what is durable)."""
    ingest, url = bridge_ingest
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), url, "--count", "200", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )

    async def commit_like_spark() -> None:
        while True:  # cancelled below
            ingest.on_committed(ingest.complete_offsets())
            await asyncio.sleep(0.02)

    committer = asyncio.create_task(commit_like_spark())
    try:
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT * 2)
    finally:
        committer.cancel()
    assert proc.returncode == 0, err.decode()
    summary = json.loads(out.decode().splitlines()[-1])
    assert summary == {"sent": 800, "delivered": 800, "unacked_after_flush": 0, "failed": []}
    assert sorted(ingest.log.stream_ids()) == [0, 1, 2, 3]
