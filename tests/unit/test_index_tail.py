"""A reload reads only what was appended to an index, and always finds what a full read finds."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from aqueduct.bridge.storage.index import (
    ENTRY_SIZE,
    MAGIC,
    IndexCorrupt,
    IndexEntry,
    IndexSnapshot,
    encode_entry,
    read_index,
)
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.bridge.storage.view import LogSnapshots, load_streams
from aqueduct.connector.frames import ConnectorMessage


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> list[IndexEntry]:
    """The index entries of 12 real group commits of one stream (3 records each)."""
    path = tmp_path_factory.mktemp("history") / "log"
    with DurableLog(path) as log:
        log.open_stream(1, "s1", "c/1").result()
        for b in range(12):
            for i in range(3):
                log.append(ConnectorMessage.build(1, b"x" * 10, message_id=3 * b + i))
            log.commit()
    return list(load_streams(path)[1].entries)


def encoded(entries: list[IndexEntry]) -> bytes:
    return b"".join(encode_entry(e) for e in entries)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def read_on(path: Path, previous: IndexSnapshot) -> IndexSnapshot:
    """A reload from ``previous``, checked against a full read of the same bytes."""
    again = read_index(path, previous)
    assert again == read_index(path)
    return again


def refused_on(path: Path, previous: IndexSnapshot) -> str:
    """A reload from ``previous`` that fails, and the message it fails with: the one a full read gives."""
    with pytest.raises(IndexCorrupt) as full:
        read_index(path)
    with pytest.raises(IndexCorrupt) as tail:
        read_index(path, previous)
    assert str(tail.value) == str(full.value)
    return str(tail.value)


def test_a_reload_decodes_only_the_appended_entries(tmp_path: Path, history: list[IndexEntry]) -> None:
    index = tmp_path / "index"
    index.write_bytes(MAGIC + encoded(history[:5]))
    first = read_index(index)
    assert read_index(index, first) is first  # nothing appended: the same snapshot
    append(index, encoded(history[5:9]))
    second = read_on(index, first)
    assert second.entries == tuple(history[:9])
    assert all(a is b for a, b in zip(second.entries, first.entries, strict=False))  # not decoded again
    append(index, encoded(history[9:]))
    assert read_on(index, second).entries == tuple(history)


def test_a_torn_last_entry_is_skipped_until_a_later_write_completes_it(
    tmp_path: Path, history: list[IndexEntry]
) -> None:
    index = tmp_path / "index"
    index.write_bytes(MAGIC + encoded(history[:3]))
    snapshot = read_index(index)
    nxt = encode_entry(history[3])
    append(index, nxt[:30])  # an entry's write seen half done
    torn = read_on(index, snapshot)
    assert torn.entries == tuple(history[:3])
    append(index, nxt[30:] + b"\x00" * ENTRY_SIZE)  # completed; the next one seen as zeros, not yet written
    done = read_on(index, torn)
    assert done.entries == tuple(history[:4])
    with open(index, "r+b") as f:  # the zeros become the entry
        f.seek(len(MAGIC) + 4 * ENTRY_SIZE)
        f.write(encode_entry(history[4]))
    assert read_on(index, done).entries == tuple(history[:5])


def test_a_flipped_byte_in_the_appended_part_is_reported_as_a_full_read_reports_it(
    tmp_path: Path, history: list[IndexEntry]
) -> None:
    index = tmp_path / "index"
    index.write_bytes(MAGIC + encoded(history[:4]))
    snapshot = read_index(index)
    added = bytearray(encoded(history[4:8]))
    added[ENTRY_SIZE + 20] ^= 0x10  # inside entry 5, with intact entries after it
    append(index, bytes(added))
    assert refused_on(index, snapshot) == (
        f"{index}: index entry 5 (byte {len(MAGIC) + 5 * ENTRY_SIZE}) fails its CRC but a later entry is "
        "intact: the index is corrupt, not torn (a crash tears only the last entry)"
    )
    index.write_bytes(MAGIC + encoded(history[:4]) + bytes(added[: 2 * ENTRY_SIZE]))  # in the last entry: torn
    assert read_on(index, snapshot).entries == tuple(history[:5])


def test_a_flipped_byte_in_the_first_known_entry_is_reported_as_a_full_read_reports_it(
    tmp_path: Path, history: list[IndexEntry]
) -> None:
    """The entries between the first and the last known one are not read again; those two are."""
    index = tmp_path / "index"
    index.write_bytes(MAGIC + encoded(history[:4]))
    snapshot = read_index(index)
    data = bytearray(index.read_bytes() + encoded(history[4:6]))
    data[len(MAGIC) + 3] ^= 0x01
    index.write_bytes(bytes(data))
    assert "index entry 0 (byte 8)" in refused_on(index, snapshot)


def test_an_entry_cut_off_in_place_and_written_again_is_read_again(tmp_path: Path, history: list[IndexEntry]) -> None:
    """The writer cuts an entry it failed to sync off the same file; the next commit writes another there."""
    index = tmp_path / "index"
    index.write_bytes(MAGIC + encoded(history[:4]))
    snapshot = read_index(index)
    other = dataclasses.replace(history[3], written_at_us=history[3].written_at_us + 1)
    os.truncate(index, len(MAGIC) + 3 * ENTRY_SIZE)
    append(index, encode_entry(other) + encoded(history[4:6]))
    again = read_on(index, snapshot)
    assert again.entries == (*history[:3], other, *history[4:6])


def test_a_rewrite_that_keeps_the_inode_number_is_read_whole(tmp_path: Path, history: list[IndexEntry]) -> None:
    """A truncation drops entries at the front; a file system may reuse the old inode number for it."""
    index = tmp_path / "index"
    index.write_bytes(MAGIC + encoded(history[:4]))
    snapshot = read_index(index)
    with open(index, "r+b") as f:  # the same inode, longer, other entries from the start
        f.write(MAGIC + encoded(history[2:10]))
    assert read_on(index, snapshot).entries == tuple(history[2:10])
    index.write_bytes(MAGIC + encoded(history[:2]))  # shrunk in place
    assert read_on(index, snapshot).entries == tuple(history[:2])
    index.unlink()
    assert read_index(index, snapshot).entries == ()


def test_log_snapshots_follow_appends_and_truncations_as_a_fresh_load_does(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with DurableLog(path, segment_bytes=200) as log:
        log.open_stream(1, "s1", "c/1").result()
        snapshots = LogSnapshots(path)
        n = 0
        before = snapshots.load()[1]
        for round_ in range(30):
            for _ in range(3):
                log.append(ConnectorMessage.build(1, b"y" * 20, message_id=n))
                n += 1
            log.commit()
            if round_ % 7 == 6:
                log.truncate(1, n - 4).result()  # drops whole segments: the index is replaced
            previous, before = before, snapshots.load()[1]
            assert before.entries == load_streams(path)[1].entries
            if previous.entries and round_ % 7 != 6:  # the known entries were not decoded again
                assert before.entries[0] is previous.entries[0]
        assert before.end == n and before.earliest > 0


def test_reloads_while_the_writer_commits_always_see_a_prefix_of_a_later_full_load(tmp_path: Path) -> None:
    import threading

    path = tmp_path / "log"
    with DurableLog(path, segment_bytes=500) as log:
        log.open_stream(1, "s1", "c/1").result()
        snapshots = LogSnapshots(path)
        stop = threading.Event()

        def write() -> None:
            n = 0
            while not stop.is_set() and n < 3000:
                log.append(ConnectorMessage.build(1, b"z" * 20, message_id=n))
                log.commit()
                n += 1
                if n % 20 == 0:
                    log.truncate(1, n - 5).result()

        writer = threading.Thread(target=write)
        writer.start()
        try:
            for _ in range(300):
                seen = snapshots.load()[1].entries
                later = load_streams(path)[1].entries
                if seen and later and later[0].first_offset <= seen[0].first_offset:  # no truncation between
                    k = later.index(seen[0])
                    assert later[k : k + len(seen)] == seen
        finally:
            stop.set()
            writer.join(30)
