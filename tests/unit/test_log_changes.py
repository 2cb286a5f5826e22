"""The change journal: readers reload only what the writer changed, and rescan when in doubt."""

from __future__ import annotations

import os
import resource
from pathlib import Path

from aqueduct.bridge.storage.changes import ChangeJournal, ChangeReader
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.bridge.storage.view import LogSnapshots
from aqueduct.connector.frames import ConnectorMessage


def test_a_reader_sees_each_change_once_and_rescans_when_the_journal_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "changes"
    reader = ChangeReader(path)
    assert reader.poll() is None  # no journal yet: rescan
    journal = ChangeJournal(path, max_bytes=100)
    assert reader.poll() is None  # first look at this journal: rescan
    journal.record([3, 1])
    journal.record([3])
    assert reader.poll() == {1, 3}
    assert reader.poll() == set()
    with open(path, "ab") as f:  # an append cut in the middle: read once it is whole
        f.write(b"\x07\x00\x00")
    assert reader.poll() == set()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00")
    assert reader.poll() == {7}
    journal.record(range(10))  # past max_bytes: a fresh journal, a new inode
    assert reader.poll() is None
    journal.record([5])
    assert reader.poll() == {5}
    journal.close()


def test_the_periodic_rescan_bounds_how_long_a_lost_hint_can_hide_a_change(tmp_path: Path) -> None:
    journal = ChangeJournal(tmp_path / "changes")
    reader = ChangeReader(tmp_path / "changes", rescan_seconds=0.0)
    assert reader.poll() is None
    assert reader.poll() is None  # every poll past the interval rescans
    journal.close()


def test_snapshots_follow_the_writers_journal(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log") as log:
        for sid in range(50):
            log.open_stream(sid, f"s{sid}", "c/1")
            log.append(ConnectorMessage.build(sid, b"x", message_id=0))
        log.commit()
        snapshots = LogSnapshots(tmp_path / "log")
        first = snapshots.load()
        assert snapshots.load() is first  # nothing changed: the same dict, no work per stream
        log.append(ConnectorMessage.build(7, b"y", message_id=1))
        log.commit()
        second = snapshots.load()
        assert second[7].end == 2 and second[8] is first[8]
    # A new writer (as after a crash) starts a fresh journal: readers rescan everything.
    os.utime(tmp_path / "log" / "streams" / "9" / "index")
    with DurableLog(tmp_path / "log") as log:
        log.append(ConnectorMessage.build(9, b"z", message_id=1))
        log.commit()
        assert snapshots.load()[9].end == 2


def test_a_group_commit_over_more_streams_than_descriptors_allowed_succeeds(tmp_path: Path) -> None:
    """200 streams in one group commit under a limit of ~60 free descriptors (2 per open stream)."""
    with DurableLog(tmp_path / "log", max_open_streams=8) as log:
        for sid in range(200):
            log.open_stream(sid, f"s{sid}", "c/1").result()
            log.append(ConnectorMessage.build(sid, b"x", message_id=0))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 60, hard))
        try:
            ends = log.commit()  # one group commit: every stream durable, files opened 8 at a time
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert len(ends) == 200 and all(log.durable_end(sid) == 1 for sid in range(200))
