"""``python -m bench.first_ack``: how long a producer started with a cold ``serve`` waits for its first ACK.

A new user starts ``aqueduct-bridge serve`` and a producer at the same
moment. This starts both, ``--repeat`` times, each time with a fresh log
directory (nothing to recover, no checkpoint: a cold start) and a
``Connector`` in this process that retries until the bridge answers,
sends one record and waits for its ACK. It reports, from the moment the
``serve`` process was spawned (medians over the repeats):

- ``durable``: the bridge's status line first counts a durable record
  (``--status-interval`` is 0.1 s, so this is within 0.1 s);
- ``first_ack``: the producer holds the ACK of its record;

and where the time goes, from the bridge's own JSON log lines:
``starting`` (the interpreter is up and has imported the bridge),
``spark_ready`` (Spark's session and its warm-up micro-batch are done:
the start minus what the warm-up took), ``warmed`` (the warm-up ended),
``listening`` (the listeners accept), ``session`` (the producer's
session started), ``first_batch`` (the status line first counts a Spark
micro-batch).

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
import re
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
WARMED = re.compile(r"Spark warmed up for the first micro-batch in ([0-9.]+) s")
MILESTONES = (
    "starting",
    "spark_ready",
    "warmed",
    "listening",
    "session",
    "durable",
    "first_batch",
    "first_ack",
)


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
        event, message = record.get("event"), str(record.get("message", ""))
        if event in ("starting", "listening") or event == "session_started":
            self.at.setdefault("session" if event == "session_started" else event, now)
        elif (warmed := WARMED.search(message)) is not None:
            self.at.setdefault("warmed", now)
            self.at.setdefault("spark_ready", now - float(warmed.group(1)))
        elif event == "status":
            if record.get("durable_records", 0) > 0:
                self.at.setdefault("durable", now)
            if record.get("batches", 0) > 0:
                self.at.setdefault("first_batch", now)


async def one_start(certs: CertPaths, workdir: Path) -> dict[str, float]:
    """Spawn ``serve`` and a producer together; the milestones of that start."""
    from aqueduct.connector.producer.client import Connector

    port = free_udp_port()
    command = [
        str(Path(sys.executable).with_name("aqueduct-bridge")), "serve", "--quic", f"127.0.0.1:{port}",
        "--log", str(workdir / "log"), "--checkpoint", str(workdir / "checkpoint"),
        "--cert", str(certs.server_cert), "--key", str(certs.server_key), "--sink", "memory",
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
        await asyncio.wait_for(bridge.wait(), 60)
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
        "repeats": len(starts),
        "median_s": medians,
        "starts": [{k: round(v, 2) for k, v in s.items()} for s in starts],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.first_ack", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--repeat", type=int, default=5, help="cold starts to take the median of (default 5)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="aqueduct-first-ack-") as tmp:
        certs = generate_certs(Path(tmp) / "certs")
        starts = []
        for i in range(args.repeat):
            starts.append(asyncio.run(one_start(certs, Path(tmp) / f"start{i}")))
            print(
                json.dumps({"start": i, **{k: round(v, 2) for k, v in starts[-1].items()}}),
                flush=True,
            )
    print(json.dumps(summary(starts), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
