"""The log's threading rule: the event loop never writes a log file.

docs/bridge.md promises that every file write of the durable log (stream
creation, group commits, truncation, the acked-points file) runs on the
log's I/O thread, so a slow disk delays durability, never the loop that
serves every connector. An audit hook sees every file the interpreter opens
for writing, renames or removes; armed while a real connector feeds the
ingest over TCP and Spark's commits are reported, it records any such call
made under the log directory on the loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from aqueduct.bridge.ingest.service import Ingest
from aqueduct.bridge.storage.acked import read_acked
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.bridge.storage.view import load_streams
from aqueduct.connector.producer.client import Connector
from aqueduct.connector.worker.tcp_listener import serve_tcp
from tests.ingest_stop import stop_ingest

TIMEOUT = 30.0  # only turns a hang into a failure
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class _WriteWatch:
    """Writes under ``root`` made on ``thread``; audit hooks stay for good, so it can be disarmed."""

    def __init__(self) -> None:
        self.root: str | None = None
        self.thread: int | None = None
        self.seen: list[tuple[str, str]] = []

    def __call__(self, event: str, args: tuple) -> None:
        if self.root is None or threading.get_ident() != self.thread:
            return
        if event == "open":
            path, mode, flags = args
            writes = (mode is not None and any(c in str(mode) for c in "wax+")) or (
                mode is None and isinstance(flags, int) and flags & WRITE_FLAGS
            )
        else:
            path, writes = args[0], event in {"os.rename", "os.remove", "os.mkdir", "os.truncate"}
        if writes and isinstance(path, str | bytes | os.PathLike):
            if os.fsdecode(path).startswith(self.root):
                self.seen.append((event, os.fsdecode(path)))

    @contextlib.contextmanager
    def armed(self, root: Path) -> Iterator[list[tuple[str, str]]]:
        self.seen = []
        self.root, self.thread = str(root), threading.get_ident()
        try:
            yield self.seen
        finally:
            self.root = None


_WATCH = _WriteWatch()
sys.addaudithook(_WATCH)


def test_the_watch_sees_a_write_on_its_thread(tmp_path: Path) -> None:
    """The hook itself works: otherwise the real test below would pass vacuously."""
    with _WATCH.armed(tmp_path) as seen:
        (tmp_path / "x").write_bytes(b"x")
        (tmp_path / "x").read_bytes()
    assert seen == [("open", str(tmp_path / "x"))]


async def test_streams_commits_truncation_and_acks_never_write_on_the_loop(tmp_path: Path) -> None:
    log = await asyncio.to_thread(DurableLog, tmp_path / "log", segment_bytes=256)
    ingest = Ingest(log)
    commits = asyncio.create_task(ingest.run())
    server = await serve_tcp("127.0.0.1", 0, ingest)
    try:
        with _WATCH.armed(tmp_path / "log") as seen:
            async with Connector(
                f"tcp://127.0.0.1:{server.port}", program="t", instance="threads"
            ) as conn:
                streams = [await conn.stream(sid, f"s{sid}") for sid in (1, 2, 3)]
                for epoch in range(1, 4):  # one group commit each: three segments per stream
                    for s in streams:
                        for i in range(10):
                            await s.send(b"m%04d" % i)
                        await s.send(None, boundary=True)
                    for _ in range(int(TIMEOUT / 0.01)):  # bounded poll: the epoch is durable
                        if [log.complete_offset(sid) for sid in log.stream_ids()] == [11 * epoch] * 3:
                            break
                        await asyncio.sleep(0.01)
                # Spark committed everything: acks, truncation of the full segments, acked.json.
                ingest.on_committed({sid: 33 for sid in (1, 2, 3)})
                ingest.truncate_below({sid: 33 for sid in (1, 2, 3)})
                await conn.wait_all_acked(TIMEOUT)
    finally:
        await stop_ingest(server, commits, log)
    assert seen == []
    assert read_acked(tmp_path / "log") == {1: 33, 2: 33, 3: 33}
    streams = load_streams(tmp_path / "log")
    assert all(streams[sid].earliest > 0 for sid in (1, 2, 3))  # committed segments were dropped
