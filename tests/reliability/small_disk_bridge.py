"""The bridge's ingest in a process of its own, driven over stdin (on a small tmpfs: under ``unshare -m``).

``python -m tests.reliability.small_disk_bridge --mount DIR --size 4m`` mounts
a tmpfs of that size at ``DIR`` (visible only in this process's mount
namespace: ``unshare -m`` gives it one, and takes it away when it exits);
without ``--size`` the log simply lives in ``DIR``. It opens a durable log
there, serves connectors over TCP on loopback (and with ``--certs DIR``
over QUIC too) with the bridge's :class:`~aqueduct.bridge.ingest.service.Ingest`,
and stands in for Spark: every 50 ms each stream's complete epochs count
as committed, as the commit listener would report them, and the commit
file it writes trails them (by two such commits, the source's by one); a
restart begins with that file's offsets and commits anew only once a
producer has reconnected. Prints ``PORT
<tcp port> [<quic port>]``, then answers one JSON line per command read
from stdin:

- ``fill``: write a filler file until the tmpfs has no room left;
- ``free``: remove it;
- ``report``: ``{"disk_full": ..., "group_commits": n, "durable": {stream: end}}``
  (``n`` counts attempts: a retry of a group commit the full disk refused too);
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
from aqueduct.bridge.storage.acked import read_acked
from aqueduct.bridge.storage.commits import read_committed
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig
from aqueduct.runtime.certs import cert_paths
from tests.spark_stand_in import SparkStandIn
from tests.stored import stored
from tests.waiting import count_calls

FILLER = "filler"
STAND_IN = "stand-in"  # the consumer name of the Spark stand-in's commit file
#: micro-batches its commit file trails the commits by: the source's trails by one; two here, so the
#: ACK of the last commit before a kill may or may not have left and the file still trails it
COMMIT_FILE_TRAILS = 2


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


async def resume_from_commit_file(ingest: Ingest) -> None:
    """What a restarted bridge learns before it listens: the commit file's offsets, a micro-batch behind.

    Reported as committed, and recorded as acked if they are news to the
    ingest, before any producer connects.
    """
    trailing = read_committed(ingest.log.path, STAND_IN)
    if trailing is None:
        return
    ingest.on_committed(trailing)
    for _ in range(1000):  # bounded: the acked offsets' write is one fsync or two away
        acked = read_acked(ingest.log.path)
        if all(acked.get(sid, 0) >= offset for sid, offset in trailing.items() if sid in ingest.log.stream_ids()):
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(f"the acked offsets never reached the commit file's {trailing}")


async def main(args: argparse.Namespace) -> None:
    mount = Path(args.mount)
    if args.size:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.size}", "tmpfs", str(mount)], check=True)
    log = DurableLog(mount / "log")
    ingest = Ingest(log)
    group_commits = count_calls(ingest, "group_commit")  # retries of a refused one included
    await resume_from_commit_file(ingest)
    config = WorkerConfig(initial_credits=args.credits)
    servers = [await serve_tcp("127.0.0.1", args.port, ingest, config)]
    if args.certs:
        certs = cert_paths(Path(args.certs))
        servers.append(
            await serve_aqueduct("127.0.0.1", 0, ingest, config, certfile=certs.server_cert, keyfile=certs.server_key)
        )

    async def spark_stand_in() -> None:
        # As Spark would: its next commit after a restart comes well after producers
        # reconnected; then every 50 ms, if there are new complete epochs, a micro-batch of them.
        stand_in = SparkStandIn(log.path, STAND_IN, COMMIT_FILE_TRAILS)
        while not ingest.counters.sessions_started:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        while True:
            positions = {s: log.complete_offset(s) for s in log.stream_ids()}
            if stand_in.commit(positions):  # a micro-batch with new records: the listener's signal too
                ingest.on_committed(positions)
            await asyncio.sleep(0.05)

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
                    "group_commits": group_commits(),
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
    ap.add_argument("--port", type=int, default=0, help="the TCP port (a restarted bridge keeps its producers' URL)")
    asyncio.run(main(ap.parse_args()))
