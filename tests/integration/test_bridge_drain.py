"""Draining a bridge, with real processes: ``aqueduct-bridge serve --ingest-only`` and ``aqueduct-bridge drain``.

No Spark: the query is the commit-file stand-in (:mod:`tests.spark_stand_in`),
committing as consumer ``default`` as the source over Flight would, which
the bridge reads to ack producers. Real ``Connector`` s over TCP send; their
sessions record every ACK, RESTART and ERROR their bridge sent
(:mod:`tests.recording_session`).

The producers are given this one bridge. Today's ``Connector`` takes any
ERROR as final; a busy refusal is one to retry later (a connector given
several bridges moves on instead), so they run with
``retry_permanent_errors=True``, which retries it with their backoff.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
import time
import urllib.request
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import pytest

from aqueduct.bridge.app.config import BridgeConfig
from aqueduct.bridge.app.drain import IN_A_SPARK_JOB, REFUSAL, DrainPhase
from aqueduct.bridge.app.drain_files import REQUEST_FILE, STATE_FILE, TAKE_TIMEOUT, read_state
from aqueduct.bridge.app.service import Bridge
from aqueduct.bridge.storage.consumers import DEFAULT_CONSUMER
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.producer import client
from aqueduct.connector.producer.client import Connector
from tests.integration.test_cli_errors import command, make_log, one_line_error, run
from tests.ports import free_port
from tests.recording_session import RecordingSession
from tests.reliability.faults import tally
from tests.spark_stand_in import SparkStandIn, complete_epochs
from tests.stored import stored
from tests.waiting import finish, wait_until

TIMEOUT = 60.0  # only turns a hang into a failure
STREAMS = (1, 2)  # one producer each
BEFORE, DURING = 60, 40  # records per stream committed before the drain, and left uncommitted when it begins


def payload(stream_id: int, message_id: int) -> bytes:
    return b"stream %d message %d" % (stream_id, message_id)


async def start_bridge(log_dir: Path, out: Path, *options: str) -> asyncio.subprocess.Process:
    """An ingest-only bridge with ``options`` (its listeners ...), its lines appended to ``out``; returns once it listens."""
    started = out.read_text().count("log served over Flight") if out.exists() else 0  # by an earlier run
    with out.open("ab") as sink:
        proc = await asyncio.create_subprocess_exec(
            *command("aqueduct-bridge"), "serve", "--ingest-only", "--log", str(log_dir), "--status-interval", "0.5",
            *options, stdout=sink, stderr=sink,
        )  # fmt: skip
    await wait_until(lambda: out.read_text().count("log served over Flight") > started or proc.returncode is not None,
                     "the bridge to listen", TIMEOUT)  # fmt: skip
    assert proc.returncode is None, out.read_text()
    return proc


def metrics(port: int) -> list[str]:
    """The bridge's /metrics, a sample a line."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=TIMEOUT) as response:
        return response.read().decode().splitlines()


async def ended(*procs: asyncio.subprocess.Process | None) -> None:
    """Kill (by its own pid) each process of the test still running: a failed test leaves none behind."""
    for proc in procs:
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()


async def drain(log_dir: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *command("aqueduct-bridge"), "drain", "--log", str(log_dir), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def until_committed(log_dir: Path, stand_in: SparkStandIn, ends: dict[int, int]) -> None:
    """Wait until every stream is complete up to ``ends`` in the log, then commit it as the query would."""
    await wait_until(lambda: complete_epochs(log_dir) == ends, f"records durable up to {ends}", TIMEOUT)
    assert stand_in.commit(ends)


async def send(streams: Sequence[object], first: int, count: int) -> None:
    for stream in streams:
        for i in range(first, first + count):
            await stream.send(payload(stream.stream_id, i))  # type: ignore[attr-defined]


@pytest.mark.parametrize("transport", ["tcp", "quic"])
async def test_a_drained_bridge_sends_its_producers_away_and_exits_once_its_consumer_committed_all_it_holds(
    transport: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(RecordingSession, "acks", [])
    monkeypatch.setattr(RecordingSession, "endings", [])
    monkeypatch.setattr(RecordingSession, "accepted", [])
    monkeypatch.setattr(client, "ConnectorSession", RecordingSession)
    log_dir, out, metrics_port = tmp_path / "log", tmp_path / "bridge.log", free_port()
    port = free_port(socket.SOCK_DGRAM if transport == "quic" else socket.SOCK_STREAM)
    listen = (f"--{transport}", f"127.0.0.1:{port}")  # the same address after the restart
    url, cafile = (
        (f"aqueduct://127.0.0.1:{port}", str(log_dir / "tls" / "ca.pem")) if transport == "quic"
        else (f"tcp://127.0.0.1:{port}", None)
    )  # fmt: skip
    bridge = await start_bridge(log_dir, out, *listen, "--metrics", f"127.0.0.1:{metrics_port}")
    assert "aqueduct_draining 0.0" in await asyncio.to_thread(metrics, metrics_port)
    stand_in = SparkStandIn(log_dir, DEFAULT_CONSUMER)
    conns = [
        Connector(url, program="drain", instance=f"p{sid}", cafile=cafile, backoff=(0.05, 0.5),
                  retry_permanent_errors=True)
        for sid in STREAMS
    ]  # fmt: skip
    drainer = None
    try:
        for conn in conns:
            await conn.connect()
        streams = [await conn.stream(sid, f"s{sid}") for conn, sid in zip(conns, STREAMS, strict=True)]
        await send(streams, 0, BEFORE)
        await until_committed(log_dir, stand_in, dict.fromkeys(STREAMS, BEFORE))
        await wait_until(lambda: all(s.acked == BEFORE for s in streams), "acks of the first records", TIMEOUT)
        await send(streams, BEFORE, DURING)
        await wait_until(lambda: complete_epochs(log_dir) == dict.fromkeys(STREAMS, BEFORE + DURING),
                         "the last records durable", TIMEOUT)  # fmt: skip

        drainer = await drain(log_dir, "--json")
        # The bridge ended both sessions with RESTART; each producer came back and was refused as busy.
        await wait_until(lambda: [e for e in RecordingSession.endings if e[2] == REFUSAL][1:], "two refusals", TIMEOUT)
        restarted = {c for c, origin, _ in RecordingSession.endings if origin == "restart"}
        refused = {c for c, origin, reason in RecordingSession.endings if (origin, reason) == ("peer", REFUSAL)}
        assert len(restarted) == len(STREAMS) and min(refused) > max(restarted)
        assert not refused & set(RecordingSession.accepted)  # ERROR instead of OK: nothing resumed there
        assert REFUSAL == "busy: retry within 10.00 s, not before 2.00 s; this bridge is draining"

        # It waits for the records the query has not committed, and says so; it does not exit meanwhile.
        await wait_until(lambda: (read_state(log_dir) or {}).get("state") == "draining", "the drain's state", TIMEOUT)
        state = read_state(log_dir) or {}
        assert state["waiting"]["records"] == len(STREAMS) * DURING, state
        assert state["waiting"]["consumers"] == [DEFAULT_CONSUMER]
        assert state["waiting"]["line"] == (
            f"waiting for {len(STREAMS) * DURING} records of 2 streams (1: {DURING}, 2: {DURING}) "
            f"to be committed by {DEFAULT_CONSUMER}"
        )
        assert state["sessions_ended"] == len(STREAMS)
        assert bridge.returncode is None and drainer.returncode is None
        await wait_until(lambda: "DRAINING, waiting for 80 records" in out.read_text(), "the status line", TIMEOUT)
        shown = await asyncio.to_thread(run, "aqueduct-bridge", "status", "--log", str(log_dir))
        assert f"bridge draining: {state['waiting']['line']}" in shown.stdout.splitlines(), shown.stdout
        samples = await asyncio.to_thread(metrics, metrics_port)
        assert "aqueduct_draining 1.0" in samples and "aqueduct_drain_waiting_records 80.0" in samples
        busy = next(s for s in samples if s.startswith('aqueduct_refusals_total{reason="busy"} '))
        assert float(busy.split()[-1]) >= len(STREAMS)  # the producers come back, and are refused again

        stand_in.commit(complete_epochs(log_dir))  # the query commits the rest: the bridge may go
        assert await asyncio.wait_for(bridge.wait(), TIMEOUT) == 0, out.read_text()[-3000:]
        code, stdout, stderr = await finish(drainer, TIMEOUT)
        assert code == 0, stderr
        summary = json.loads(stdout)
        assert (summary["state"], summary["drained"], summary["sessions_ended"]) == ("drained", True, len(STREAMS))
        assert stderr.splitlines()[0] == f"aqueduct-bridge drain: {state['waiting']['line']}"
        assert "drained: every record this bridge holds is committed by its consumers" in out.read_text()

        # Every record acked exactly once: the producers, retrying, find the bridge restarted on its log
        # (a rolling restart) and are told what was committed while they were away.
        bridge = await start_bridge(log_dir, out, *listen)
        assert not (log_dir / STATE_FILE).exists()  # the last run's drain is not this one's
        for conn in conns:
            await conn.wait_all_acked(TIMEOUT)
        bridge.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(bridge.wait(), TIMEOUT) == 0
    finally:
        for conn in conns:
            await conn.close()
        await ended(bridge, drainer)
    for sid in STREAMS:
        points = [point for _, s, point in RecordingSession.acks if s == sid]
        assert all(a <= b for a, b in pairwise(points)) and points[-1] == BEFORE + DURING, points
    with DurableLog(log_dir) as log:
        rows = [(sid, mid, data) for sid in log.stream_ids() for mid, data in stored(log, sid)]
    t = tally({s: {m: payload(s, m) for m in range(BEFORE + DURING)} for s in STREAMS}, rows)
    assert t.exactly_once, t


async def test_sigterm_during_a_drain_stops_the_bridge_as_before_and_drain_says_it_did_not_finish(
    tmp_path: Path,
) -> None:
    log_dir, port, out = tmp_path / "log", free_port(), tmp_path / "bridge.log"
    bridge = await start_bridge(log_dir, out, "--tcp", f"127.0.0.1:{port}")
    drainer = None
    try:
        async with Connector(f"tcp://127.0.0.1:{port}", program="drain", instance="p") as conn:
            stream = await conn.stream(1, "s")
            await send([stream], 0, 10)
            await wait_until(lambda: complete_epochs(log_dir) == {1: 10}, "records durable", TIMEOUT)
        drainer = await drain(log_dir)
        await wait_until(lambda: (read_state(log_dir) or {}).get("state") == "draining", "the drain", TIMEOUT)
        bridge.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(bridge.wait(), TIMEOUT) == 0
        code, stdout, stderr = await finish(drainer, TIMEOUT)
    finally:
        await ended(bridge, drainer)
    assert code == 1 and not stdout
    assert stderr.splitlines()[-1] == "aqueduct-bridge drain: stopped before the drain finished (SIGTERM)"
    assert "SIGTERM: stopped in" in out.read_text()


async def test_drain_no_wait_returns_once_the_bridge_took_the_request(tmp_path: Path) -> None:
    """A record no consumer committed keeps the bridge draining: the command returns all the same."""
    bridge = Bridge(BridgeConfig(tmp_path / "log", tcp=("127.0.0.1", 0)))
    await bridge.start(run_query=False)
    bridge.follow_drain_requests()
    drainer = None
    try:
        assert bridge.tcp_address is not None
        async with Connector(f"tcp://127.0.0.1:{bridge.tcp_address[1]}", program="drain", instance="p") as conn:
            stream = await conn.stream(1, "s")
            await send([stream], 0, 1)
            await wait_until(lambda: complete_epochs(tmp_path / "log") == {1: 1}, "the record durable", TIMEOUT)
        drainer = await drain(tmp_path / "log", "--no-wait")
        code, stdout, stderr = await finish(drainer, TIMEOUT)
        phase = bridge.drain.phase
    finally:
        await ended(drainer)
        await bridge.stop()
    assert (code, stderr) == (0, "")
    assert stdout.decode() == (f"drain requested: the bridge on {tmp_path / 'log'} took it and exits once its consumers "
                      "committed all it holds\n")  # fmt: skip
    assert phase is DrainPhase.DRAINING  # taken, and still waiting for its consumer


def test_drain_refuses_a_log_no_bridge_runs_on_and_bad_input_in_one_line(tmp_path: Path) -> None:
    one_line_error(run("aqueduct-bridge", "drain", "--log", str(tmp_path / "missing")),
                   f"aqueduct-bridge drain: log path '{tmp_path / 'missing'}' does not exist or is not a directory")  # fmt: skip
    make_log(tmp_path / "log")
    one_line_error(run("aqueduct-bridge", "drain", "--log", str(tmp_path / "log")),
                   f"aqueduct-bridge drain: no bridge is running on log '{tmp_path / 'log'}' (nothing holds its "
                   "lock): nothing to drain")  # fmt: skip
    assert not (tmp_path / "log" / "DRAIN").exists()  # no request left for the next bridge
    done = run("aqueduct-bridge", "drain", "--log", str(tmp_path / "log"), "--timeout", "0")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == ["aqueduct-bridge drain: argument --timeout: must be a positive number, got 0"]
    done = run("aqueduct-bridge", "drain")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["aqueduct-bridge drain: the following arguments are required: --log"]


def test_drain_help_says_what_a_drain_does() -> None:
    done = run("aqueduct-bridge", "drain", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "refuses new producers as busy" in text and "exits 0 once they committed every record it holds" in text
    for option in ("--log DIR", "--json", "--no-wait", "--timeout SECONDS"):
        assert option in text


async def test_a_writer_that_does_not_follow_drain_requests_is_named_and_the_request_taken_back(tmp_path: Path) -> None:
    """A log held by a process that follows no drain requests (an older bridge): the command says so."""
    make_log(tmp_path / "log")
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys, time; from aqueduct.bridge.storage.log import DurableLog; "
        "log = DurableLog(sys.argv[1]); print('open', flush=True); time.sleep(120)", str(tmp_path / "log"),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert await asyncio.wait_for(holder.stdout.readline(), TIMEOUT) == b"open\n"
        waited = await asyncio.to_thread(run, "aqueduct-bridge", "drain", "--log", str(tmp_path / "log"), "--no-wait")
    finally:
        await ended(holder)
    assert waited.returncode == 1 and not waited.stdout  # even without waiting for the exit: nobody took it
    assert waited.stderr.splitlines() == [
        f"aqueduct-bridge drain: the bridge did not take the drain request within {TAKE_TIMEOUT:.0f} s (a bridge "
        "older than this command does not drain)"
    ]
    assert not (tmp_path / "log" / REQUEST_FILE).exists()  # no request left for the next bridge to find


@pytest.mark.parametrize("wait", ["until it exits", "--no-wait"])
async def test_a_bridge_inside_a_spark_job_refuses_a_drain_at_once_in_one_line_and_serves_on(
    wait: str, tmp_path: Path
) -> None:
    """The bridge as ``SparkBridge`` runs it, without Spark (tests/spark/test_receiver.py asks a real one)."""
    bridge = Bridge(BridgeConfig(tmp_path / "log", tcp=("127.0.0.1", 0)))
    await bridge.start(run_query=False)
    bridge.follow_drain_requests(refusal=IN_A_SPARK_JOB)
    drainer = None
    try:
        began = time.monotonic()
        drainer = await drain(tmp_path / "log", *([wait] if wait.startswith("--") else []))
        code, stdout, stderr = await finish(drainer, TIMEOUT)
        answered = time.monotonic() - began
        assert bridge.tcp_address is not None
        conn = Connector(f"tcp://127.0.0.1:{bridge.tcp_address[1]}", program="drain", instance="p")
        await asyncio.wait_for(conn.connect(), TIMEOUT)  # new producers are still welcome: not busy
        await conn.close(flush_timeout=0)
    finally:
        await ended(drainer)
        await bridge.stop()
    assert code == 1 and not stdout
    assert stderr.splitlines() == [f"aqueduct-bridge drain: {IN_A_SPARK_JOB}"]
    assert answered < TAKE_TIMEOUT  # answered, not given up on
    assert bridge.drain.phase is DrainPhase.SERVING
    assert (read_state(tmp_path / "log") or {})["state"] == "serving"  # what `aqueduct-bridge status` shows
