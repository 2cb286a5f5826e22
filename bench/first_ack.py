"""``python -m bench.first_ack``: how long a producer started with ``serve`` waits for its first ACK.

A new user starts ``aqueduct-bridge serve`` and a producer at the same
moment. This starts both, ``--repeat`` times, and a ``Connector`` in this
process that retries until the bridge answers, sends one record and waits
for its ACK. A ``cold`` start has a fresh log directory (nothing to
recover, no checkpoint); a ``restart`` reuses the log and checkpoint of
the previous start (an unmeasured first start makes them). The sink is
``serve``'s default, Parquet (the memory sink cannot restart from its
checkpoint). It reports,
from the moment the ``serve`` process was spawned (medians over the
repeats):

- ``durable``: the bridge's status line first counts a durable record
  (``--status-interval`` is 0.1 s, so this is within 0.1 s);
- ``first_ack``: the producer holds the ACK of its record;

and where the time goes, from the bridge's own JSON log lines:
``starting`` (the interpreter is up and has imported the bridge),
``listening`` (the listeners accept), ``session`` (the producer's session
started), ``spark_ready`` (Spark's session and the commit listener are
up), ``query_running`` (Spark started the query), ``first_batch`` (the
status line first counts a Spark micro-batch). ``--bridge`` takes the
``aqueduct-bridge`` executables to compare (e.g. another checkout's),
started in turn so that each meets the same load.

Run it alone (it starts Spark): ``flock /tmp/aqueduct-heavy.lock python
-m bench.first_ack``. Certificates are made once, beforehand, so the
producer can verify the bridge from its first attempt.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aqueduct.runtime.certs import CertPaths, generate_certs

COOKIE = "first-ack"
TIMEOUT = 180.0  # one start; only turns a hang into a failure
STOP_TIMEOUT = 300.0  # one stop: the first start's waits for its JVM to write the class archive
MILESTONES = (
    "starting",
    "listening",
    "session",
    "durable",
    "spark_start",
    "jvm_up",
    "spark_ready",
    "query_running",
    "first_batch",
    "first_ack",
)
MODES = ("cold", "restart")


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class BridgeLines:
    """The milestones a bridge's JSON log lines show, in seconds since its spawn."""

    def __init__(self, spawned: float) -> None:
        self.spawned = spawned
        self.at: dict[str, float] = {}

    def seen(self, line: bytes) -> None:
        try:
            record = json.loads(line)
        except ValueError:
            return  # the JVM's own lines
        now = time.monotonic() - self.spawned
        event = record.get("event")
        if event in ("starting", "listening", "query_running") or event == "session_started":
            self.at.setdefault("session" if event == "session_started" else event, now)
            if event == "query_running":  # the query's start took query_s of it, the session session_s before
                ready = now - float(record.get("query_s", 0.0))
                self.at.setdefault("spark_ready", ready)
                self.at.setdefault("spark_start", ready - float(record.get("session_s", 0.0)))
                if "jvm_s" in record:  # the gateway's launch, the first part of the session's start
                    self.at.setdefault("jvm_up", self.at["spark_start"] + float(record["jvm_s"]))
        elif event == "status":
            if record.get("durable_records", 0) > 0:
                self.at.setdefault("durable", now)
            if record.get("batches", 0) > 0:
                self.at.setdefault("first_batch", now)


async def one_start(certs: CertPaths, workdir: Path, bridge_cli: str) -> dict[str, float]:
    """Spawn ``serve`` (``bridge_cli``) and a producer together; the milestones of that start."""
    from aqueduct.connector.producer.client import Connector

    port = free_udp_port()
    command = [
        bridge_cli, "serve", "--quic", f"127.0.0.1:{port}",
        "--log", str(workdir / "log"), "--checkpoint", str(workdir / "checkpoint"),
        "--cert", str(certs.server_cert), "--key", str(certs.server_key), "--output", str(workdir / "out"),
        "--log-format", "json", "--status-interval", "0.1",
    ]  # fmt: skip
    env = {**os.environ, "AQUEDUCT_COOKIE": COOKIE}
    spawned = time.monotonic()
    bridge = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    lines = BridgeLines(spawned)

    async def read() -> None:
        assert bridge.stderr is not None
        async for line in bridge.stderr:
            lines.seen(line)

    reader = asyncio.create_task(read())
    connector = Connector(
        f"aqueduct://127.0.0.1:{port}", cookie=COOKIE, program="first-ack", cafile=str(certs.ca),
        connect_timeout=TIMEOUT, backoff=(0.05, 0.2),
    )  # fmt: skip
    try:
        await connector.connect()
        stream = await connector.stream(1, "first-ack/1")
        await stream.send(b"hello", message_id=stream.resume_from)
        await connector.wait_all_acked(TIMEOUT)
        acked = time.monotonic() - spawned
        await connector.close(flush_timeout=1.0)
        deadline = time.monotonic() + 5.0  # the status line counting the batch may come just after
        while "first_batch" not in lines.at and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            bridge.send_signal(signal.SIGTERM)
        await asyncio.wait_for(bridge.wait(), STOP_TIMEOUT)
        reader.cancel()
    return {**lines.at, "first_ack": acked}


def summary(starts: list[dict[str, float]]) -> dict[str, Any]:
    """The median of each milestone over the starts (and every start's figures)."""
    medians = {
        name: round(statistics.median(s[name] for s in starts), 2)
        for name in MILESTONES
        if all(name in s for s in starts)
    }
    return {
        "starts_measured": len(starts),
        "median_s": medians,
        "starts": [{k: round(v, 2) for k, v in s.items()} for s in starts],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.first_ack", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--repeat", type=int, default=5, help="measured starts per mode and bridge to take the median of (default 5)"
    )
    parser.add_argument(
        "--mode", choices=(*MODES, "both"), default="cold",
        help="cold: a fresh log each start; restart: the previous start's log and checkpoint (default cold)",
    )  # fmt: skip
    parser.add_argument(
        "--bridge", action="append", metavar="EXECUTABLE",
        help="aqueduct-bridge to start; repeat to compare several, started in turn (default: this venv's)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    bridges = args.bridge or [str(Path(sys.executable).with_name("aqueduct-bridge"))]
    modes = MODES if args.mode == "both" else (args.mode,)
    print(json.dumps({"load_average": os.getloadavg(), "nproc": os.cpu_count()}), flush=True)
    results: dict[str, dict[str, list[dict[str, float]]]] = {b: {m: [] for m in modes} for b in bridges}
    with tempfile.TemporaryDirectory(prefix="aqueduct-first-ack-") as tmp:
        certs = generate_certs(Path(tmp) / "certs")
        for mode in modes:
            for i in range(args.repeat + (mode == "restart")):
                for b, bridge_cli in enumerate(bridges):
                    workdir = Path(tmp) / mode / str(b) / (str(i) if mode == "cold" else "restarted")
                    start = asyncio.run(one_start(certs, workdir, bridge_cli))
                    measured = mode == "cold" or i > 0  # a restart's first start makes its log
                    if measured:
                        results[bridge_cli][mode].append(start)
                    row = {"bridge": bridge_cli, "mode": mode, "start": i, "measured": measured}
                    print(json.dumps({**row, **{k: round(v, 2) for k, v in start.items()}}), flush=True)
    report = {b: {m: summary(s) for m, s in by_mode.items()} for b, by_mode in results.items()}
    print(json.dumps({"load_average_after": os.getloadavg(), "results": report}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
