"""Every stored batch carries a CRC32C: a flipped byte is reported where it is, never returned."""

from __future__ import annotations

import json
import logging
import pickle
import struct
import zlib
from pathlib import Path

import pytest

from aqueduct.bridge.app.status import format_table, read_status
from aqueduct.bridge.source.datasource import SPARK_STRUCT, AqueductDataLoss, AqueductDataSource
from aqueduct.bridge.storage.commits import commit_file, read_committed
from aqueduct.bridge.storage.corruption import corrupt_ranges
from aqueduct.bridge.storage.index import (
    ENTRY_SIZE,
    MAGIC,
    MAGIC_V1,
    IndexCorrupt,
    IndexEntry,
    read_entries,
)
from aqueduct.bridge.storage.log import DurableLog, LogError
from aqueduct.bridge.storage.segment import BatchCorrupt, segment_name
from aqueduct.bridge.storage.view import load_streams
from aqueduct.connector.frames import ConnectorMessage

CONNECTOR = "c/1"


def write_batches(path: Path, batches: int = 3, per_batch: int = 4) -> None:
    """A log with stream 5: ``batches`` group commits of ``per_batch`` records, ids 0.."""
    with DurableLog(path) as log:
        log.open_stream(5, "five", CONNECTOR).result()
        for b in range(batches):
            for i in range(per_batch):
                m = b * per_batch + i
                log.append(ConnectorMessage.build(5, f"payload-{m:04d}".encode(), message_id=m))
            log.commit()


def flip_payload_byte(path: Path, batch: int) -> IndexEntry:
    """Flip one bit of a stored payload in the ``batch``-th batch of stream 5; return its entry."""
    directory = path / "streams" / "5"
    entry = read_entries(directory / "index")[0][batch]
    segment = directory / segment_name(entry.segment)
    data = bytearray(segment.read_bytes())
    at = data.index(b"payload-", entry.position) + 9  # inside the first payload of the batch
    assert at < entry.position + entry.length
    data[at] ^= 0x01
    segment.write_bytes(bytes(data))
    return entry


def read_stream(path: Path) -> list[bytes]:
    s = load_streams(path)[5]
    return [p for b in s.read(s.earliest, s.end) for p in b.column("payload").to_pylist()]


def test_every_new_entry_carries_the_crc32c_of_its_batch_bytes(tmp_path: Path) -> None:
    write_batches(tmp_path / "log")
    index = tmp_path / "log" / "streams" / "5" / "index"
    assert index.read_bytes()[: len(MAGIC)] == MAGIC
    entries, _ = read_entries(index)
    assert len(entries) == 3 and all(e.checksum is not None for e in entries)
    assert read_stream(tmp_path / "log") == [f"payload-{m:04d}".encode() for m in range(12)]


def test_a_flipped_byte_in_a_payload_is_reported_with_log_stream_and_offsets(tmp_path: Path) -> None:
    path = tmp_path / "log"
    write_batches(path)
    flip_payload_byte(path, 1)
    with pytest.raises(BatchCorrupt) as caught:
        read_stream(path)
    assert str(caught.value).startswith(f"log {str(path)!r} stream 5 records [4, 8) are corrupt: the batch at byte ")
    assert "fails its CRC32C check" in str(caught.value)
    # the batches around it still read
    s = load_streams(path)[5]
    assert [b.num_rows for b in s.read(0, 4)] == [4]
    assert [b.num_rows for b in s.read(8, 12)] == [4]


def test_the_source_raises_data_loss_or_skips_and_records_the_batch(tmp_path: Path) -> None:
    path = tmp_path / "log"
    write_batches(path)
    flip_payload_byte(path, 1)
    start, end = {"5": 0}, {"5": 12}

    def read(**options: str) -> list[int]:
        r = pickle.loads(pickle.dumps(AqueductDataSource({"log": str(path), **options}).streamReader(SPARK_STRUCT)))
        parts = pickle.loads(pickle.dumps(r.partitions(start, end)))
        return [m for p in parts for b in r.read(p) for m in b.column("message_id").to_pylist()]

    with pytest.raises(AqueductDataLoss, match=r"^aqueduct source: log .* stream 5 records \[4, 8\) are corrupt"):
        read()
    assert read(failOnDataLoss="false") == [0, 1, 2, 3, 8, 9, 10, 11]
    assert corrupt_ranges(path) == [(5, 4, 8)]
    report = read_status(path)
    assert report["corrupt"] == [{"stream_id": 5, "records": [4, 8]}]
    assert "stream 5 records [4, 8): corrupt" in format_table(report)
    batch = AqueductDataSource({"log": str(path)}).reader(SPARK_STRUCT)
    with pytest.raises(AqueductDataLoss, match=r"stream 5 records \[4, 8\) are corrupt"):
        [b for p in batch.partitions() for b in batch.read(p)]


def test_reopening_a_log_with_a_corrupt_batch_reports_it_and_keeps_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "log"
    write_batches(path)
    flip_payload_byte(path, 1)
    with caplog.at_level(logging.ERROR), DurableLog(path) as log:
        assert "stream 5 records [4, 8) are corrupt" in caplog.text
        assert corrupt_ranges(path) == [(5, 4, 8)]
        # its ids still count as received: a resend is a duplicate, not a second copy
        assert all(log.is_duplicate(5, m) for m in range(12))
        assert log.reference_at(5, 6) == 4  # inside the corrupt batch: the point before it
        assert log.reference_at(5, 8) == 8  # at its end: the index says
        log.append(ConnectorMessage.build(5, b"new", message_id=12))
        log.commit()
    assert read_entries(path / "streams" / "5" / "index")[0][-1].checksum is not None


def _as_v1(path: Path) -> None:
    """Rewrite stream 5's index in the entry format before checksums (what older bridges wrote)."""
    index = path / "streams" / "5" / "index"
    data = index.read_bytes()
    body = struct.Struct("<QQIQIQQQQQQBQ")
    out = bytearray(MAGIC_V1)
    for i in range(len(MAGIC), len(data), ENTRY_SIZE):
        f = struct.unpack("<QQIQIQQQQQQBQI", data[i : i + ENTRY_SIZE - 4])
        raw = body.pack(*f[:11], f[11] & 1, f[12])
        out += raw + struct.pack("<I", zlib.crc32(raw))
    index.write_bytes(bytes(out))


def test_a_log_written_before_checksums_opens_and_its_new_batches_get_them(tmp_path: Path) -> None:
    path = tmp_path / "log"
    write_batches(path, batches=2)
    _as_v1(path)
    old = read_entries(path / "streams" / "5" / "index")[0]
    assert len(old) == 2 and all(e.checksum is None for e in old)
    assert len(read_stream(path)) == 8  # a reader of the old format
    with DurableLog(path) as log:
        assert log.durable_end(5) == 8 and log.durable_reference(5) == 8
        log.append(ConnectorMessage.build(5, b"payload-0008", message_id=8))
        log.commit()
    index = path / "streams" / "5" / "index"
    assert index.read_bytes()[: len(MAGIC)] == MAGIC
    entries = read_entries(index)[0]
    assert [e.checksum is not None for e in entries] == [False, False, True]
    assert read_stream(path) == [f"payload-{m:04d}".encode() for m in range(9)]


def test_a_flipped_byte_inside_an_index_stops_the_writer_and_readers_instead_of_cutting(tmp_path: Path) -> None:
    path = tmp_path / "log"
    write_batches(path)
    index = path / "streams" / "5" / "index"
    data = bytearray(index.read_bytes())
    data[len(MAGIC) + ENTRY_SIZE + 20] ^= 0x10  # inside entry 1 of 3
    index.write_bytes(bytes(data))
    with pytest.raises(LogError) as caught:
        DurableLog(path)
    assert str(caught.value) == (
        f"log {str(path)!r} stream 5: {index}: index entry 1 (byte {len(MAGIC) + ENTRY_SIZE}) fails its CRC "
        "but a later entry is intact: the index is corrupt, not torn (a crash tears only the last entry); "
        "nothing was cut"
    )
    assert index.read_bytes() == bytes(data)  # untouched, segments too
    with pytest.raises(IndexCorrupt, match="index entry 1"):
        load_streams(path)
    DurableLog(path.parent / "other").close()  # the failed open released its lock and nothing else


def test_a_torn_last_index_entry_is_still_cut_as_a_crash_leaves_it(tmp_path: Path) -> None:
    path = tmp_path / "log"
    write_batches(path)
    index = path / "streams" / "5" / "index"
    data = bytearray(index.read_bytes())
    data[-5] ^= 0x10  # the last entry, as a torn write leaves it
    index.write_bytes(bytes(data))
    with DurableLog(path) as log:
        assert log.durable_end(5) == 8


def test_a_commit_file_with_changed_bytes_is_reported_and_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "log"
    write_batches(path)
    r = AqueductDataSource({"log": str(path), "consumer": "q"}).streamReader(SPARK_STRUCT)
    r.commit({"5": 8})
    assert read_committed(path, "q") == {5: 8}
    file = commit_file(path, "q")
    text = file.read_text()
    file.write_text(text.replace('"5": 8', '"5": 9'))  # a flipped bit in a digit: still JSON
    with caplog.at_level(logging.ERROR):
        assert read_committed(path, "q") is None
    assert f"commit file {file} is corrupt (its offsets fail their CRC32C check" in caplog.text
    file.write_text(text.replace("{", "[", 1))  # no longer JSON
    assert read_committed(path, "q") is None
    file.write_text(json.dumps({"offsets": {"5": 4}, "committed_at": 0}))  # written before checksums
    assert read_committed(path, "q") == {5: 4}
