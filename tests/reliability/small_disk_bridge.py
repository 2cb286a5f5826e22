"""The bridge's ingest in a process of its own, driven over stdin (on a small tmpfs: under ``unshare -m``).

``python -m tests.reliability.small_disk_bridge --mount DIR --size 4m`` mounts
a tmpfs of that size at ``DIR`` (visible only in this process's mount
namespace: ``unshare -m`` gives it one, and takes it away when it exits);
without ``--size`` the log simply lives in ``DIR``. It opens a durable log
there, serves connectors over TCP on loopback (and with ``--certs DIR``
over QUIC too) with the bridge's :class:`~aqueduct.bridge.ingest.service.Ingest`,
and stands in for Spark: every 50 ms each stream's complete epochs count
as committed, as the commit listener would report them. Prints ``PORT
<tcp port> [<quic port>]``, then answers one JSON line per command read
from stdin:

- ``fill``: write a filler file until the tmpfs has no room left;
- ``free``: remove it;
- ``report``: ``{"disk_full": ..., "durable": {stream: end}}``;
- ``stop``: stop serving, commit, close the log; answer every stored data
  record as ``[stream, message id, payload in hex]`` (then exit 0).

The bridge's own log lines go to stderr, for the test to read.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from aqueduct.bridge.ingest.service import Ingest
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig
from aqueduct.runtime.certs import cert_paths
from tests.stored import stored

FILLER = "filler"


def fill(directory: Path) -> int:
    """Write zeros until the file system refuses; return the bytes written."""
    chunk = bytes(64 * 1024)
    written = 0
    fd = os.open(directory / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            try:
                written += os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return written
                chunk = chunk[: len(chunk) // 2]  # the last few pages too
    finally:
        os.close(fd)


async def main(args: argparse.Namespace) -> None:
    mount = Path(args.mount)
    if args.size:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.size}", "tmpfs", str(mount)], check=True)
    log = DurableLog(mount / "log")
    ingest = Ingest(log)
    config = WorkerConfig(initial_credits=args.credits)
    servers = [await serve_tcp("127.0.0.1", 0, ingest, config)]
    if args.certs:
        certs = cert_paths(Path(args.certs))
        servers.append(
            await serve_aqueduct("127.0.0.1", 0, ingest, config, certfile=certs.server_cert, keyfile=certs.server_key)
        )

    async def spark_stand_in() -> None:
        while True:
            await asyncio.sleep(0.05)
            ingest.on_committed({s: log.complete_offset(s) for s in log.stream_ids()})

    tasks = [asyncio.create_task(ingest.run()), asyncio.create_task(spark_stand_in())]
    print("PORT " + " ".join(str(s.port) for s in servers), flush=True)
    loop = asyncio.get_running_loop()
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            command, *rest = line.split()
            if command == "fill":
                answer: object = {"filled": await asyncio.to_thread(fill, mount)}
            elif command == "free":
                (mount / FILLER).unlink()
                answer = {"freed": True}
            elif command == "report":
                answer = {
                    "disk_full": ingest.disk_full[0] if ingest.disk_full else None,
                    "durable": {str(s): log.durable_end(s) for s in log.stream_ids()},
                }
            elif command == "stop":
                break
            else:
                answer = {"error": f"unknown command {command!r} {rest}"}
            print(json.dumps(answer), flush=True)
    finally:
        for server in servers:
            await server.close()
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await ingest.group_commit()  # what a verdict reads: a failure here fails the test
    rows = [[sid, mid, payload.hex()] for sid in log.stream_ids() for mid, payload in stored(log, sid)]
    print(json.dumps({"stored": rows}), flush=True)
    log.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    ap = argparse.ArgumentParser()
    ap.add_argument("--mount", required=True)
    ap.add_argument("--size", help="mount a tmpfs of this size at --mount (root, in a private mount namespace)")
    ap.add_argument("--certs", help="also serve QUIC with the certificates in this directory")
    ap.add_argument("--credits", type=int, default=64)
    asyncio.run(main(ap.parse_args()))
