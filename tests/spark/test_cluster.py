"""The bridge with a real standalone Spark cluster whose executors cannot see its disk.

One cluster (``cluster`` fixture: master and two workers from pyspark's
``spark-class``, loopback only) serves every test here. Bridges keep their
logs under ``cluster.hidden``, which the workers and their executors see
as an empty tmpfs: the only way to the records is the bridges' Flight
servers. Drivers run as real processes (``aqueduct-bridge serve``, or
``cluster_driver.py`` for a query over several bridges).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from aqueduct.connector import Connector
from demo.producer import PROGRAM, produce, send_share
from demo.sinkfiles import read_committed
from demo.verify import verify_output
from demo.workload import Workload
from tests.spark.standalone import (
    CONNECT_SERVER_ENV,
    DIE_WITH_THE_TESTS,
    StandaloneCluster,
    cluster_env,
    free_port,
)

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TIMEOUT = 240.0  # generous: only there to turn a hang into a failure


def _program() -> list[str]:
    script = Path(sys.executable).with_name("aqueduct-bridge")
    return [str(script)] if script.exists() else [sys.executable, "-m", "aqueduct.bridge.app.cli"]


async def _spawn(command: list[str], log: Path, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    with open(log, "ab") as out:
        return await asyncio.create_subprocess_exec(
            *DIE_WITH_THE_TESTS, *command, stdout=out, stderr=out, env=cluster_env(env)
        )


async def _until(predicate: Callable[[], bool], what: str, proc: asyncio.subprocess.Process | None = None,
                 log: Path | None = None) -> None:  # fmt: skip
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        if proc is not None and proc.returncode is not None:
            raise AssertionError(f"exited ({proc.returncode}) before {what}: {log.read_text()[-3000:] if log else ''}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {log.read_text()[-3000:] if log else ''}")
        await asyncio.sleep(0.25)


async def _until_set(event: asyncio.Event, what: str, work: asyncio.Future, proc: asyncio.subprocess.Process,
                     log: Path) -> None:  # fmt: skip
    """Wait for ``event``; fail at once if ``work`` (the producers) ended first, or ``proc`` did."""
    await _until(lambda: event.is_set() or work.done(), what, proc, log)
    if not event.is_set():
        work.result()  # raises the producers' error
        raise AssertionError(f"the producers ended before {what}")


async def _held_producer(url: str, workload: Workload, index: int, halfway: asyncio.Event, go_on: asyncio.Event,
                         acked_first: bool) -> dict:  # fmt: skip
    """Producer ``index`` of ``workload``, held halfway (after all it sent was acked if ``acked_first``) until ``go_on``."""
    middle = _halfway(workload)

    async with Connector(url, program=PROGRAM, instance=f"p{index}") as conn:

        async def hold(k: int) -> None:
            if k == middle:
                if acked_first:
                    await conn.wait_all_acked(TIMEOUT)
                halfway.set()
                await go_on.wait()

        await send_share(conn, workload, index, between_rounds=hold)
        await conn.wait_all_acked(TIMEOUT)
        return {"connections": conn.stats.connections}


def _halfway(workload: Workload) -> int:
    """The first round past the middle that starts an epoch: a batch takes only closed epochs, so all before it can be acked."""
    steps = workload.steps(0)
    return next(k for k in range(len(steps) // 2, len(steps)) if steps[k - 1].boundary)


def _rows_of(out: Path, stream_ids: set[int]) -> int:
    table = read_committed(out)
    return 0 if table is None else sum(1 for sid in table.column("stream_id").to_pylist() if sid in stream_ids)


async def _stop(proc: asyncio.subprocess.Process | None) -> int | None:
    if proc is None or proc.returncode is not None:
        return None if proc is None else proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return await asyncio.wait_for(proc.wait(), 60)
    except TimeoutError:
        proc.kill()
        return await proc.wait()


async def test_serve_with_a_cluster_master_reads_over_flight_exactly_once_and_acks_all(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    (cluster.hidden / "marker").write_text("the executors must not see this")
    assert cluster.sees_hidden() == []  # the workers' (and executors') view of the bridges' disk
    workload = Workload(producers=2, streams=2, events=600, epoch=40)
    port = free_port()
    log, out = tmp_path / "serve.log", tmp_path / "out"
    bridge = await _spawn([
        *_program(), "serve", "--tcp", f"127.0.0.1:{port}", "--log", str(cluster.hidden / "serve" / "log"),
        "--output", str(out), "--master", cluster.master_url, "--trigger-interval", "0.5",
        "--status-interval", "1", "--spark-log-level", "WARN",
    ], log)  # fmt: skip
    try:
        await _until(lambda: "listening on" in log.read_text(), "the listeners", bridge, log)
        assert "log served over Flight at 127.0.0.1:" in log.read_text()
        stats = await asyncio.wait_for(
            asyncio.gather(*(produce(f"tcp://127.0.0.1:{port}", workload, p, timeout=TIMEOUT) for p in range(2))),
            TIMEOUT,
        )
        assert len(stats) == 2  # every message acked: committed in the sink by the cluster's query
        assert cluster.executor_namespaces_hide_the_logs()
        await _until(lambda: verify_output(out, workload.expected()).rows >= workload.total, "every row", bridge, log)
        assert await _stop(bridge) == 0
    finally:
        await _stop(bridge)
    result = verify_output(out, workload.expected())
    assert result.ok, result.problems()


async def test_one_query_over_two_ingest_only_bridges_survives_a_killed_bridge_exactly_once(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    """Producers -> two ingest-only bridges -> one cluster query; one bridge SIGKILLed and restarted.

    The driver first tries a wrong and a missing credential (both refused),
    then runs the query over both bridges as consumer ``default``, whose
    commits ack each bridge's producers. The bridge is killed with its
    producer mid-stream but no batch reading it (a batch planned with its
    records waits for it to come back: that is
    ``test_bridge_flight.test_a_read_waits_for_a_bridge_that_comes_back``).
    """
    workload = Workload(producers=2, streams=2, events=1200, epoch=40)
    names = ("eu", "us")
    ports = {n: free_port() for n in names}
    flights = {n: free_port() for n in names}
    logs = {n: cluster.hidden / n / "log" for n in names}

    def bridge_command(n: str) -> list[str]:
        return [
            *_program(), "serve", "--ingest-only", "--tcp", f"127.0.0.1:{ports[n]}", "--log", str(logs[n]),
            "--flight", f"127.0.0.1:{flights[n]}", "--status-interval", "1", "--credits", "64", "--max-lag", "200",
        ]  # fmt: skip

    bridges = {n: await _spawn(bridge_command(n), tmp_path / f"{n}.log") for n in names}
    driver: asyncio.subprocess.Process | None = None
    out, driver_log, stop_file = tmp_path / "out", tmp_path / "driver.log", tmp_path / "STOP"
    try:
        for n in names:
            await _until(lambda n=n: "log served over Flight" in (tmp_path / f"{n}.log").read_text(),
                         f"bridge {n}", bridges[n], tmp_path / f"{n}.log")  # fmt: skip
        tls = {n: logs[n] / "tls" for n in names}
        driver = await _spawn([
            sys.executable, str(Path(__file__).with_name("cluster_driver.py")), cluster.master_url,
            ",".join(f"{n}=127.0.0.1:{flights[n]}" for n in names),
            ",".join(f"{n}={tls[n] / 'flight.token'}" for n in names),
            ",".join(f"{n}={tls[n] / 'ca.pem'}" for n in names),
            str(out), str(tmp_path / "checkpoint"), str(stop_file),
        ], driver_log)  # fmt: skip
        await _until(lambda: "query started" in driver_log.read_text(), "the query", driver, driver_log)
        text = driver_log.read_text()
        assert "wrong credential refused: " in text and "missing or wrong credential" in text
        assert "missing credential refused: " in text and "no credential for bridge" in text

        # Both producers stop halfway; "us" first waits until all it sent is acked, i.e. in the
        # sink. So no batch planned from here on reads "us": killing it then cannot catch a
        # batch mid-read (that batch would wait for "us" to come back, see docs/bridge.md).
        halfway = {n: asyncio.Event() for n in names}
        go_on = {n: asyncio.Event() for n in names}
        producers = asyncio.gather(*(
            _held_producer(f"tcp://127.0.0.1:{ports[n]}", workload, p, halfway[n], go_on[n], acked_first=n == "us")
            for p, n in enumerate(names)
        ))  # fmt: skip
        for n in names:
            await _until_set(halfway[n], f"{n}'s producer halfway", producers, driver, driver_log)
        us_streams, eu_streams = set(workload.stream_ids(1)), set(workload.stream_ids(0))
        sent = sum(not step.boundary for i in range(workload.streams) for step in workload.steps(i)[: _halfway(workload)])
        assert _rows_of(out, us_streams) == sent  # every row "us" sent is in the sink
        bridges["us"].send_signal(signal.SIGKILL)
        await bridges["us"].wait()
        # The query goes on with "eu" (a micro-batch of its rows commits, planned with "us"
        # gone); the producer of "us" waits, mid-stream.
        eu_rows = _rows_of(out, eu_streams)
        go_on["eu"].set()
        await _until(lambda: _rows_of(out, eu_streams) > eu_rows, "a batch of 'eu' without 'us'", driver, driver_log)
        assert driver.returncode is None
        bridges["us"] = await _spawn(bridge_command("us"), tmp_path / "us.log")
        go_on["us"].set()
        stats = await asyncio.wait_for(producers, TIMEOUT)
        assert stats[1]["connections"] >= 2  # the producer of "us" resumed on a new session
        await _until(lambda: verify_output(out, workload.expected()).rows >= workload.total, "every row",
                     driver, driver_log)  # fmt: skip
        assert cluster.executor_namespaces_hide_the_logs()
        stop_file.write_text("stop")
        assert await asyncio.wait_for(driver.wait(), TIMEOUT) == 0, driver_log.read_text()[-3000:]
    finally:
        for proc in (driver, *bridges.values()):
            await _stop(proc)
    result = verify_output(out, workload.expected())
    assert result.ok, result.problems()



async def test_the_receiver_in_a_cluster_driver_reads_over_flight_exactly_once(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    workload = Workload(producers=1, streams=2, events=400, epoch=40)
    port = free_port()
    out, log, stop_file = tmp_path / "out", tmp_path / "receiver.log", tmp_path / "STOP"
    driver = await _spawn([
        sys.executable, str(Path(__file__).with_name("cluster_receiver.py")), cluster.master_url,
        str(cluster.hidden / "receiver" / "log"), str(port), str(out), str(tmp_path / "checkpoint"), str(stop_file),
    ], log)  # fmt: skip
    try:
        await _until(lambda: "query started" in log.read_text(), "the receiver's query", driver, log)
        assert "bridge reads the log at 127.0.0.1:" in log.read_text()  # over Flight, not from disk
        await asyncio.wait_for(produce(f"tcp://127.0.0.1:{port}", workload, 0, timeout=TIMEOUT), TIMEOUT)
        await _until(lambda: verify_output(out, workload.expected()).rows >= workload.total, "every row", driver, log)
        stop_file.write_text("stop")
        assert await asyncio.wait_for(driver.wait(), TIMEOUT) == 0, log.read_text()[-3000:]
    finally:
        await _stop(driver)
    result = verify_output(out, workload.expected())
    assert result.ok, result.problems()


async def test_a_spark_connect_client_reads_two_bridges_exactly_once_and_acks_all(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    """The thin-client way (notebooks, hosted Spark): a Connect server on the cluster, a client without a JVM.

    The Connect server pyspark ships runs its driver against the cluster;
    the client (``connect_client.py``) registers the source and runs the
    query remotely, reading two ingest-only bridges over Flight.
    """
    workload = Workload(producers=2, streams=2, events=300, epoch=40)
    names = ("eu", "us")
    ports = {n: free_port() for n in names}
    flights = {n: free_port() for n in names}
    logs = {n: cluster.hidden / f"connect-{n}" / "log" for n in names}
    connect_port = free_port()
    procs: list[asyncio.subprocess.Process] = []
    server_log, client_log = tmp_path / "connect-server.log", tmp_path / "client.log"
    out, stop_file = tmp_path / "out", tmp_path / "STOP"
    try:
        for n in names:
            procs.append(await _spawn([
                *_program(), "serve", "--ingest-only", "--tcp", f"127.0.0.1:{ports[n]}", "--log", str(logs[n]),
                "--flight", f"127.0.0.1:{flights[n]}", "--status-interval", "1",
            ], tmp_path / f"{n}.log"))  # fmt: skip
        server = await _spawn(
            cluster.connect_server_command(connect_port, tmp_path / "connect-work"), server_log, CONNECT_SERVER_ENV
        )
        procs.append(server)
        for n, proc in zip(names, procs, strict=False):
            await _until(lambda n=n: "log served over Flight" in (tmp_path / f"{n}.log").read_text(),
                         f"bridge {n}", proc, tmp_path / f"{n}.log")  # fmt: skip
        await _until(lambda: "Spark Connect server started" in server_log.read_text(), "the Connect server",
                     server, server_log)  # fmt: skip
        tls = {n: logs[n] / "tls" for n in names}
        client = await _spawn([
            sys.executable, str(Path(__file__).with_name("connect_client.py")), f"sc://127.0.0.1:{connect_port}",
            ",".join(f"{n}=127.0.0.1:{flights[n]}" for n in names),
            ",".join(f"{n}={tls[n] / 'flight.token'}" for n in names),
            ",".join(f"{n}={tls[n] / 'ca.pem'}" for n in names),
            str(out), str(tmp_path / "checkpoint"), str(stop_file),
        ], client_log)  # fmt: skip
        procs.append(client)
        await _until(lambda: "query started" in client_log.read_text(), "the client's query", client, client_log)
        stats = await asyncio.wait_for(asyncio.gather(*(
            produce(f"tcp://127.0.0.1:{ports[n]}", workload, p, timeout=TIMEOUT) for p, n in enumerate(names)
        )), TIMEOUT)  # fmt: skip
        assert len(stats) == 2  # every message acked: committed by the client's query
        await _until(lambda: verify_output(out, workload.expected()).rows >= workload.total, "every row",
                     client, client_log)  # fmt: skip
        assert cluster.executor_namespaces_hide_the_logs()
        stop_file.write_text("stop")
        assert await asyncio.wait_for(client.wait(), TIMEOUT) == 0, client_log.read_text()[-3000:]
    finally:
        for proc in reversed(procs):
            await _stop(proc)
    result = verify_output(out, workload.expected())
    assert result.ok, result.problems()
