"""Streams created by the thousand: in batches with two syncs, each failing alone.

A fleet's NOTIFYs arrive together; the log creates the files of every
stream queued meanwhile in one job on its I/O thread. These tests hold
that thread busy so that a known set of streams lands in one batch.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from aqueduct.bridge.storage.durability import SyncGroup
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.bridge.storage.view import load_streams
from aqueduct.connector.frames import ConnectorMessage

TIMEOUT = 30.0  # only turns a hang into a failure


def _hold_io(log: DurableLog) -> threading.Event:
    """Keep the log's I/O thread busy until the returned event is set."""
    release = threading.Event()
    log._io.submit(release.wait, TIMEOUT)
    return release


def test_a_thousand_streams_created_at_once_are_all_there_after_reopening(tmp_path: Path) -> None:
    with DurableLog(tmp_path) as log:
        release = _hold_io(log)
        answers = [log.open_stream(sid, f"s{sid}", f"c/{sid % 7}", point_of_reference=sid) for sid in range(1000)]
        release.set()
        assert [a.result(TIMEOUT) for a in answers] == list(range(1000))
        for sid in range(0, 1000, 10):
            log.append(ConnectorMessage.build(sid, b"x", message_id=sid))
        log.commit()
    assert not list(tmp_path.glob("streams/*/*.tmp"))
    with DurableLog(tmp_path) as log:
        assert log.stream_ids() == list(range(1000))
        assert log.durable_end(990) == 1 and log.durable_end(991) == 0
    assert len(load_streams(tmp_path)) == 1000


def test_a_stream_whose_directory_cannot_be_made_fails_alone_and_is_retried(tmp_path: Path) -> None:
    with DurableLog(tmp_path) as log:
        blocker = tmp_path / "streams" / "5"
        blocker.write_bytes(b"not a directory")
        release = _hold_io(log)
        answers: dict[int, Future[int]] = {sid: log.open_stream(sid, f"s{sid}", "c/1") for sid in range(10)}
        release.set()
        with pytest.raises(OSError):
            answers[5].result(TIMEOUT)
        assert all(answers[sid].result(TIMEOUT) == 0 for sid in answers if sid != 5)
        blocker.unlink()
        assert log.open_stream(5, "s5", "c/1").result(TIMEOUT) == 0
        log.append(ConnectorMessage.build(5, b"late", message_id=0))
        assert log.commit() == {5: 1}
    with DurableLog(tmp_path) as log:
        assert log.stream_ids() == list(range(10))
        assert log.durable_end(5) == 1


def test_the_same_stream_notified_twice_in_one_batch_answers_both(tmp_path: Path) -> None:
    with DurableLog(tmp_path) as log:
        release = _hold_io(log)
        first = log.open_stream(1, "s1", "c/1", point_of_reference=3)
        again = log.open_stream(1, "renamed", "c/1", point_of_reference=3)
        release.set()
        assert first.result(TIMEOUT) == again.result(TIMEOUT) == 3
    with DurableLog(tmp_path) as log:
        assert log.stream_names() == {1: "renamed"}


def test_a_crash_before_the_renames_leaves_a_log_that_opens_without_the_stream(tmp_path: Path) -> None:
    with DurableLog(tmp_path):
        pass
    half = tmp_path / "streams" / "7"  # what a crash between the two syncs leaves
    half.mkdir()
    (half / "meta.json.tmp").write_bytes(b'{"stream_id": 7, "na')
    (half / "index.tmp").write_bytes(b"")
    with DurableLog(tmp_path) as log:
        assert log.stream_ids() == []
        assert log.open_stream(7, "s7", "c/1").result(TIMEOUT) == 0
        log.append(ConnectorMessage.build(7, b"x", message_id=0))
        log.commit()
    with DurableLog(tmp_path) as log:
        assert log.stream_names() == {7: "s7"} and log.durable_end(7) == 1


@pytest.mark.parametrize("use_syncfs", [True, False])
def test_a_sync_group_reports_a_file_that_is_gone(tmp_path: Path, use_syncfs: bool) -> None:
    files = [tmp_path / f"f{i}" for i in range(40)]
    for f in files:
        f.write_bytes(b"x")
    group = SyncGroup(use_syncfs=use_syncfs)
    for f in files:
        group.add_path(f)
    group.add_dir(tmp_path)
    group.sync()  # many files, one file system: durable, whichever way
    assert len(group) == 0
    small = SyncGroup(use_syncfs=use_syncfs)
    small.add_path(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        small.sync()


def test_a_stream_queued_for_creation_again_keeps_the_records_indexed_meanwhile(tmp_path: Path) -> None:
    """A re-NOTIFY that sees the stream still being created queues it again; when that
    second creation runs, a group commit may already have indexed records in it."""
    with DurableLog(tmp_path) as log:
        log.open_stream(1, "s1", "c/1").result(TIMEOUT)
        log.append(ConnectorMessage.build(1, b"kept", message_id=0))
        log.commit()
        log._streams[1].files.created = False  # what the re-NOTIFY saw while the first creation ran
        assert log.open_stream(1, "s1-renamed", "c/1").result(TIMEOUT) == 1
    with DurableLog(tmp_path) as log:
        assert log.durable_end(1) == 1 and log.stream_names() == {1: "s1-renamed"}
