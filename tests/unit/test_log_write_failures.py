"""Group commits that fail: a full disk is held and retried, any other failed sync stops the log.

The failures are injected at the system call (``os.fsync`` raising the
errno a kernel returns) on real files; tests/reliability/test_disk_full.py
fills a real tmpfs instead.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from aqueduct.bridge.storage.log import DurableLog, LogFailed, LogFull
from aqueduct.bridge.storage.view import load_streams
from aqueduct.connector.frames import ConnectorMessage


def ids(path: Path, sid: int) -> list[int]:
    s = load_streams(path)[sid]
    return [m for b in s.read(s.earliest, s.end) for m in b.column("message_id").to_pylist()]


def fail_fsync(monkeypatch: pytest.MonkeyPatch, code: int, times: int) -> list[int]:
    """Make the next ``times`` fsyncs fail with ``code``; returns the list of failed calls' fds."""
    real, failed = os.fsync, []

    def fsync(fd: int) -> None:
        if len(failed) < times:
            failed.append(fd)
            raise OSError(code, os.strerror(code))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return failed


def append(log: DurableLog, sid: int, ids: range) -> None:
    for m in ids:
        log.append(ConnectorMessage.build(sid, b"p%d" % m, message_id=m))


@pytest.mark.parametrize("max_open_streams", [512, 1])  # 1: stream 2's files are opened for each write alone
def test_a_commit_without_room_is_cut_off_held_and_written_first_next_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_open_streams: int
) -> None:
    path = tmp_path / "log"
    with DurableLog(path, max_open_streams=max_open_streams) as log:
        for sid in (1, 2):
            log.open_stream(sid, f"s{sid}", "c/1").result()
        append(log, 1, range(0, 5))
        log.commit()
        sizes = {p.name: p.stat().st_size for p in (path / "streams" / "1").iterdir()}
        fail_fsync(monkeypatch, errno.ENOSPC, 1)
        append(log, 1, range(5, 10))
        append(log, 2, range(0, 3))
        with pytest.raises(LogFull, match=r"group commit failed: No space left on device; 8 records held"):
            log.commit()
        assert (log.durable_end(1), log.durable_end(2)) == (5, 0)  # nothing of it visible
        assert {p.name: p.stat().st_size for p in (path / "streams" / "1").iterdir()} == sizes  # cut off
        assert ids(path, 1) == list(range(5))
        append(log, 1, range(10, 12))  # arrives meanwhile: written after the held batch
        append(log, 2, range(3, 4))
        assert log.commit() == {1: 12, 2: 4}
        assert log.commit() == {}  # nothing held any more
    assert ids(path, 1) == list(range(12)) and ids(path, 2) == [0, 1, 2, 3]
    with DurableLog(path) as reopened:
        assert (reopened.durable_end(1), reopened.durable_reference(1)) == (12, 12)


def test_a_failed_fsync_stops_the_log_and_a_reopen_recovers_what_was_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log"
    with DurableLog(path) as log:
        log.open_stream(1, "s", "c/1").result()
        append(log, 1, range(0, 5))
        log.commit()
        fail_fsync(monkeypatch, errno.EIO, 1)
        append(log, 1, range(5, 10))
        with pytest.raises(LogFailed) as caught:
            log.commit()
        assert str(caught.value) == (
            f"log {str(path)!r}: group commit failed: Input/output error (errno 5): what was written "
            "since the last good sync may not be durable"
        )
        append(log, 1, range(10, 12))
        with pytest.raises(LogFailed, match="Input/output error"):  # fail-stop: no retry trusts that fsync
            log.commit()
        assert log.durable_end(1) == 5
    monkeypatch.undo()
    with DurableLog(path) as reopened:  # the restart: the index vouches for the first 5 only
        assert reopened.durable_end(1) == 5
        append(reopened, 1, range(5, 7))
        reopened.commit()
    assert ids(path, 1) == list(range(7))


def test_a_truncation_without_room_for_its_new_index_leaves_the_old_one_and_commits_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log"
    real = os.fsync

    def fsync(fd: int) -> None:  # only the rewritten index finds no room
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/index.tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    with DurableLog(path, segment_bytes=256) as log:
        log.open_stream(1, "s", "c/1").result()
        for first in range(0, 40, 5):  # several segments
            append(log, 1, range(first, first + 5))
            log.commit()
        monkeypatch.setattr(os, "fsync", fsync)
        with pytest.raises(OSError, match="No space left on device"):
            log.truncate(1, 30).result()
        monkeypatch.undo()
        append(log, 1, range(40, 45))
        log.commit()  # the index is reopened and appended to as it stands on disk
        assert ids(path, 1) == list(range(45))
        assert log.truncate(1, 30).result() > 0
    with DurableLog(path) as reopened:
        assert reopened.durable_end(1) == 45 and reopened.durable_reference(1) == 45
