"""Crash recovery keeps the log appendable: what a crash leaves behind never hides later records.

Each test damages the files as a crash would (a torn index entry, a stale
entry, a torn segment tail longer than the next batch), reopens, appends,
and reopens again: the records written after the recovery must still be
there, in order, with their bytes. (test_log_durable.py checks what the
first reopen shows; these found mutants of the recovery that it missed,
see docs/testing.md.)
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from aqueduct.bridge.storage.index import ENTRY_SIZE, MAGIC
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.bridge.storage.segment import segment_name
from aqueduct.connector.frames import ConnectorMessage
from aqueduct.wire.modes import Mode
from tests.stored import stored

CONNECTOR = "c/1"


def write(path: Path, *payloads: bytes, first_id: int = 0) -> None:
    """Append each payload as its own group commit (one index entry each)."""
    with DurableLog(path) as log:
        log.open_stream(1, "s", CONNECTOR)
        for i, payload in enumerate(payloads, first_id):
            log.append(ConnectorMessage.build(1, payload, message_id=i))
            log.commit()


def read(path: Path) -> list[tuple[int, bytes]]:
    with DurableLog(path) as log:
        return stored(log, 1)


def test_a_torn_index_entry_is_cut_so_the_entries_after_it_survive_the_next_reopen(tmp_path: Path) -> None:
    path = tmp_path / "log"
    write(path, b"a", b"b")
    with open(path / "streams" / "1" / "index", "ab") as f:
        f.write(os.urandom(ENTRY_SIZE // 2))  # a crash in the middle of an entry's write
    write(path, b"c", first_id=2)  # appended after the recovery ...
    assert read(path) == [(0, b"a"), (1, b"b"), (2, b"c")]  # ... and still there on the next open


def test_an_entry_that_does_not_continue_its_predecessor_ends_the_index(tmp_path: Path) -> None:
    path = tmp_path / "log"
    write(path, b"a", b"b", b"c")
    index = path / "streams" / "1" / "index"
    data = index.read_bytes()
    first = data[len(MAGIC) : len(MAGIC) + ENTRY_SIZE]
    index.write_bytes(data + first)  # a stale entry: its CRC holds, its offsets do not follow
    assert read(path) == [(0, b"a"), (1, b"b"), (2, b"c")]
    write(path, b"d", first_id=3)
    assert read(path) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


def test_a_torn_segment_tail_longer_than_the_next_batch_is_cut_whole(tmp_path: Path) -> None:
    path = tmp_path / "log"
    write(path, b"a")
    segment = path / "streams" / "1" / segment_name(0)
    with open(segment, "ab") as f:
        f.write(os.urandom(64 * 1024))  # half of a large batch
    write(path, b"b", first_id=1)
    assert read(path) == [(0, b"a"), (1, b"b")]
    with DurableLog(path) as log:
        (last,) = log._streams[1].files.entries[-1:]
        assert segment.stat().st_size == last.position + last.length  # nothing beyond the last batch
    assert pa.ipc.open_stream(segment.read_bytes()).read_all().num_rows == 2


def test_ids_above_the_point_that_only_truncated_segments_held_stay_duplicates_after_a_reopen(tmp_path: Path) -> None:
    """UNORDERED: id 5 arrived early, its segment was truncated; a resend of 5 after a restart is a duplicate."""
    path = tmp_path / "log"
    with DurableLog(path, segment_bytes=1) as log:  # a segment per group commit
        log.open_stream(1, "u", CONNECTOR, mode=Mode.UNORDERED)
        for m in (0, 2, 5, 1, 3):  # offsets 0..4; the point is 1 until id 1 arrives at offset 3
            log.append(ConnectorMessage.build(1, b"%d" % m, message_id=m))
            log.commit()
        assert log.truncate(1, 3).result() == 3  # drops ids 0, 2 and 5
    with DurableLog(path) as log:
        assert log.durable_reference(1) == 4
        assert [m for m in range(8) if log.is_duplicate(1, m)] == [0, 1, 2, 3, 5]
