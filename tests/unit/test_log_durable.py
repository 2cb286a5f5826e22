"""The durable log: group commit, crash recovery, positions, epochs, trimming."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from aqueduct.bridge.storage.index import ENTRY_SIZE
from aqueduct.bridge.storage.log import DuplicateMessage, DurableLog, LogError, LogLocked
from aqueduct.bridge.storage.pending import record_batches
from aqueduct.bridge.storage.schema import STORED_SCHEMA
from aqueduct.bridge.storage.segment import segment_bases, segment_name
from aqueduct.bridge.storage.view import NotALog, StreamMeta, load_streams
from aqueduct.connector.frames import ConnectorMessage
from aqueduct.wire.modes import Mode

CONNECTOR = "sensors/host-1"


def rows(log_path: Path, stream_id: int) -> list[dict]:
    """Every committed record of a stream, as a reader in another process sees it."""
    s = load_streams(log_path)[stream_id]
    out: list[dict] = []
    for batch in s.read(s.earliest, s.end):
        out.extend(batch.to_pylist())
    return out


@pytest.fixture
def log(tmp_path: Path):
    lg = DurableLog(tmp_path / "log", segment_bytes=1024)
    yield lg
    lg.close()


def test_records_are_invisible_until_commit_then_read_back_exactly(log: DurableLog) -> None:
    log.open_stream(7, "temps", CONNECTOR).result()  # files exist once done
    assert log.append(ConnectorMessage.build(7, b"a", message_id=1, event_time=1_000_000, key=b"k")).offset == 0
    assert log.append(ConnectorMessage.build(7, b"b", message_id=2)).offset == 1
    assert log.append(ConnectorMessage.build(7, b"c")).offset == 2  # EPHEMERAL
    assert rows(log.path, 7) == []
    assert log.durable_end(7) == 0
    assert log.commit() == {7: 3}
    got = rows(log.path, 7)
    assert [r["payload"] for r in got] == [b"a", b"b", b"c"]
    assert [r["message_id"] for r in got] == [1, 2, None]
    assert got[0]["key"] == b"k" and got[1]["key"] is None
    assert got[0]["event_time"].timestamp() == 1.0 and got[1]["event_time"] is None
    assert {(r["stream_id"], r["stream_name"], r["connector"]) for r in got} == {
        (7, "temps", CONNECTOR)
    }
    assert log.commit() == {}  # nothing new


def test_segments_are_valid_arrow_ipc_streams(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log") as log:
        log.open_stream(1, "s", CONNECTOR)
        for i in range(3):
            log.append(ConnectorMessage.build(1, b"x" * 10, message_id=i))
            log.commit()
    seg = tmp_path / "log" / "streams" / "1" / segment_name(0)
    table = pa.ipc.open_stream(seg.read_bytes()).read_all()
    assert table.schema.equals(STORED_SCHEMA)
    assert table.column("message_id").to_pylist() == [0, 1, 2]


def test_reopen_keeps_everything_committed_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with DurableLog(path) as lg:
        lg.open_stream(1, "s", CONNECTOR)
        lg.append(ConnectorMessage.build(1, b"kept", message_id=10))
        lg.commit()
        lg.append(ConnectorMessage.build(1, b"lost", message_id=11))  # never committed: a crash loses it
    with DurableLog(path) as lg:
        assert lg.durable_end(1) == 1
        assert lg.durable_reference(1) == 11
        assert lg.is_duplicate(1, 10) and not lg.is_duplicate(1, 11)
        assert lg.append(ConnectorMessage.build(1, b"again", message_id=11)).offset == 1
        lg.commit()
    assert [r["payload"] for r in rows(path, 1)] == [b"kept", b"again"]


def test_second_writer_is_refused_naming_the_first(log: DurableLog) -> None:
    with pytest.raises(LogLocked) as caught:
        DurableLog(log.path)
    assert str(caught.value) == f"log {str(log.path)!r} is already open for writing by process {os.getpid()}"


def test_torn_segment_tail_is_cut_off_before_the_next_write(tmp_path: Path) -> None:
    """Files reopen lazily (max_open_streams): the cut happens when the stream is written again."""
    path = tmp_path / "log"
    with DurableLog(path) as lg:
        lg.open_stream(1, "s", CONNECTOR)
        lg.append(ConnectorMessage.build(1, b"one", message_id=1))
        lg.commit()
    seg = path / "streams" / "1" / segment_name(0)
    with open(seg, "ab") as f:  # half a batch: a crash in the middle of a write
        f.write(b"\xff\xff\xff\xff\x40\x01\x00\x00" + os.urandom(100))
    assert [r["payload"] for r in rows(path, 1)] == [b"one"]  # readers ignore it already
    with DurableLog(path) as lg:
        lg.append(ConnectorMessage.build(1, b"two", message_id=2))
        lg.commit()
    assert [r["payload"] for r in rows(path, 1)] == [b"one", b"two"]
    assert pa.ipc.open_stream(seg.read_bytes()).read_all().num_rows == 2


def test_batch_written_but_not_indexed_is_invisible_and_harmless(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with DurableLog(path) as lg:
        lg.open_stream(1, "s", CONNECTOR)
        lg.append(ConnectorMessage.build(1, b"one", message_id=1))
        lg.commit()
        # Crash between the data fsync and the index write: the whole batch is
        # in the segment, its index entry is not.
        lg.append(ConnectorMessage.build(1, b"ghost", message_id=2))
        stream = lg._streams[1]
        sealed = stream.seal(0)
        assert sealed is not None
        stream.files.write(sealed, next(record_batches([sealed])), lg.segment_bytes)
        stream.files.segment.sync()
    assert [r["payload"] for r in rows(path, 1)] == [b"one"]
    with DurableLog(path) as lg:
        assert lg.durable_end(1) == 1 and not lg.is_duplicate(1, 2)
        lg.append(ConnectorMessage.build(1, b"two", message_id=2))
        lg.commit()
    assert [r["payload"] for r in rows(path, 1)] == [b"one", b"two"]


def test_torn_index_entry_is_ignored_and_cut(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with DurableLog(path) as lg:
        lg.open_stream(1, "s", CONNECTOR)
        for i in range(3):
            lg.append(ConnectorMessage.build(1, b"%d" % i, message_id=i))
            lg.commit()
    index = path / "streams" / "1" / "index"
    data = index.read_bytes()
    index.write_bytes(data[: -ENTRY_SIZE // 2])  # last entry torn in half
    assert len(rows(path, 1)) == 2
    with DurableLog(path) as lg:
        assert lg.durable_end(1) == 2
        lg.append(ConnectorMessage.build(1, b"x", message_id=2))
        lg.commit()
    data = index.read_bytes()
    index.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))  # last entry fails its CRC (a flipped byte, never the same)
    assert [r["payload"] for r in rows(path, 1)] == [b"0", b"1"]


def test_orphan_segment_from_a_crashed_roll_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with DurableLog(path, segment_bytes=1) as lg:
        lg.open_stream(1, "s", CONNECTOR)
        lg.append(ConnectorMessage.build(1, b"a", message_id=0))
        lg.commit()
    d = path / "streams" / "1"
    (d / segment_name(1)).write_bytes(b"partial header")
    with DurableLog(path, segment_bytes=1) as lg:
        assert segment_bases(d) == [0]
        lg.append(ConnectorMessage.build(1, b"b", message_id=1))
        lg.commit()
    assert segment_bases(d) == [0, 1]
    assert [r["payload"] for r in rows(path, 1)] == [b"a", b"b"]


def test_reader_view_while_writer_appends(log: DurableLog) -> None:
    log.open_stream(1, "s", CONNECTOR).result()
    seen = []
    for i in range(20):
        log.append(ConnectorMessage.build(1, b"p%d" % i, message_id=i))
        if i % 3 == 2:
            log.commit()
        seen.append(len(rows(log.path, 1)))
    assert seen == sorted(seen) and seen[-1] == 18
    assert len(segment_bases(log.path / "streams" / "1")) > 1


def test_duplicates_and_references_ordered(log: DurableLog) -> None:
    log.open_stream(1, "s", CONNECTOR)
    log.append(ConnectorMessage.build(1, b"a", message_id=5))
    log.append(ConnectorMessage.build(1, b"b", message_id=9, unstable=True))  # UNSTABLE_REFERENCE: does not move it
    log.append(ConnectorMessage.build(1, b"c"))  # EPHEMERAL
    log.append(ConnectorMessage.build(1, b"d", message_id=12))
    log.commit()
    assert log.durable_reference(1) == 13
    assert [log.reference_at(1, x) for x in range(5)] == [0, 6, 6, 6, 13]
    assert log.is_duplicate(1, 12) and log.is_duplicate(1, 3) and not log.is_duplicate(1, 13)
    with pytest.raises(DuplicateMessage, match="message id 12 was already received"):
        log.append(ConnectorMessage.build(1, b"again", message_id=12))


def test_unordered_reference_is_first_missing_id(log: DurableLog) -> None:
    log.open_stream(2, "u", CONNECTOR, mode=Mode.UNORDERED, point_of_reference=100)
    for m in (101, 103, 100, 102):
        log.append(ConnectorMessage.build(2, b"", message_id=m))
    log.commit()
    assert [log.reference_at(2, x) for x in range(5)] == [100, 100, 100, 102, 104]
    assert log.is_duplicate(2, 103) and not log.is_duplicate(2, 104)


def test_references_of_connector_for_ok_frames(log: DurableLog) -> None:
    log.open_stream(1, "a", CONNECTOR)
    log.open_stream(2, "b", "other/x")
    log.open_stream(3, "c", CONNECTOR)
    log.append(ConnectorMessage.build(1, b"", message_id=4))
    log.commit()
    assert log.references_of(CONNECTOR) == [(1, "a", 5), (3, "c", 0)]
    with pytest.raises(LogError, match="belongs to connector 'other/x'"):
        log.open_stream(2, "b", CONNECTOR)


def test_epochs_one_per_message_without_boundaries(log: DurableLog) -> None:
    log.open_stream(1, "s", CONNECTOR)
    for i in range(3):
        log.append(ConnectorMessage.build(1, b"x", message_id=i))
    log.commit()
    assert [r["epoch"] for r in rows(log.path, 1)] == [0, 1, 2]
    assert log.complete_offset(1) == 3


def test_boundaries_close_epochs_and_complete_trails_open_epoch(log: DurableLog) -> None:
    log.open_stream(1, "s", CONNECTOR, boundaries=True)
    ids = iter(range(100))
    for _ in range(3):
        log.append(ConnectorMessage.build(1, b"x", message_id=next(ids)))
    log.append(ConnectorMessage.build(1, message_id=next(ids), boundary=True))
    log.append(ConnectorMessage.build(1, b"y", message_id=next(ids)))
    log.commit()
    assert [r["epoch"] for r in rows(log.path, 1)] == [0, 0, 0, 0, 1]
    assert [r["boundary"] for r in rows(log.path, 1)] == [False] * 3 + [True, False]
    assert log.complete_offset(1) == 4
    s = log.snapshot(1)
    assert s.first_offset_of_epoch_at_least(1) == 4 and s.epoch_at(2) == 0
    with pytest.raises(LogError, match="BOUNDARY record needs a message id"):
        log.append(ConnectorMessage.build(1, boundary=True))


def test_first_boundary_switches_an_undeclared_stream_for_good(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with DurableLog(path) as lg:
        lg.open_stream(1, "s", CONNECTOR)
        lg.append(ConnectorMessage.build(1, b"a", message_id=0))
        lg.append(ConnectorMessage.build(1, message_id=1, boundary=True))
        lg.commit()
    with DurableLog(path) as lg:
        lg.append(ConnectorMessage.build(1, b"b", message_id=2))
        lg.commit()
        assert lg.complete_offset(1) == 2  # b waits for the next boundary
    assert [r["epoch"] for r in rows(path, 1)] == [0, 1, 2]


def test_truncate_drops_whole_committed_segments(log: DurableLog) -> None:
    log.open_stream(1, "s", CONNECTOR)
    for i in range(40):
        log.append(ConnectorMessage.build(1, b"p" * 100, message_id=i))
        log.commit()
    d = log.path / "streams" / "1"
    before = segment_bases(d)
    assert len(before) > 3
    with pytest.raises(LogError, match="only 40 records are committed"):
        log.truncate(1, 41)
    earliest = log.truncate(1, 25).result()
    after = segment_bases(d)
    assert earliest == after[0] and earliest <= 25 and after == [b for b in before if b >= earliest]
    got = rows(log.path, 1)
    assert [r["message_id"] for r in got] == list(range(earliest, 40))
    assert log.reference_at(1, earliest) == earliest  # still answerable at the cut
    assert log.is_duplicate(1, 3)  # dedup survives truncation
    assert log.truncate(1, 40).result() == after[-1]  # the active segment is always kept


def test_truncate_survives_reopen_and_dedup_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with DurableLog(path, segment_bytes=1) as lg:
        lg.open_stream(1, "u", CONNECTOR, mode=Mode.UNORDERED)
        for m in (0, 1, 3, 4, 6):
            lg.append(ConnectorMessage.build(1, b"", message_id=m))
            lg.commit()
        lg.truncate(1, 2).result()
    with DurableLog(path) as lg:
        assert lg.snapshot(1).earliest == 2
        assert [m for m in range(8) if lg.is_duplicate(1, m)] == [0, 1, 3, 4, 6]
        assert lg.durable_reference(1) == 2


def test_retention_keeps_recent_segments(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log", segment_bytes=1, retention_seconds=60) as lg:
        lg.open_stream(1, "s", CONNECTOR)
        for i in range(4):
            lg.append(ConnectorMessage.build(1, b"", message_id=i))
            lg.commit(now=1000.0 + 10 * i)  # segments written at t=1000, 1010, 1020, 1030
        assert lg.truncate(1, 4, now=1030.0).result() == 0  # all younger than 60 s
        assert lg.truncate(1, 4, now=1075.0).result() == 2  # t=1000 and 1010 are old enough
        assert lg.truncate(1, 4, now=5000.0).result() == 3  # the active segment stays


def test_out_of_range_values_are_refused(log: DurableLog) -> None:
    log.open_stream(1, "s", CONNECTOR)
    with pytest.raises(LogError, match="message id 9223372036854775808 is outside"):
        log.append(ConnectorMessage.build(1, b"", message_id=1 << 63))
    with pytest.raises(LogError, match="stream 5 was never opened"):
        log.append(ConnectorMessage.build(5, b""))


def test_reader_refuses_a_directory_that_is_not_a_log(tmp_path: Path) -> None:
    with pytest.raises(NotALog, match="does not exist"):
        load_streams(tmp_path / "missing")
    with pytest.raises(NotALog, match="is not an aqueduct log"):
        load_streams(tmp_path)


READER_SCRIPT = """
import sys, time
from pathlib import Path
from aqueduct.bridge.storage.view import load_streams

path, done = Path(sys.argv[1]), Path(sys.argv[2])
last_end, reads = 0, 0
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    finished = done.exists()
    streams = load_streams(path)
    if 1 in streams:
        s = streams[1]
        assert s.end >= last_end, f"end went back: {s.end} < {last_end}"
        ids = [m for b in s.read(s.earliest, s.end) for m in b.column("message_id").to_pylist()]
        assert ids == list(range(s.earliest, s.end)), "rows do not match their offsets"
        last_end, reads = s.end, reads + 1
    if finished:
        break
print(last_end, reads)
"""


def test_another_process_reads_consistently_while_the_writer_appends(tmp_path: Path) -> None:
    path, done = tmp_path / "log", tmp_path / "done"
    with DurableLog(path, segment_bytes=4096) as lg:
        lg.open_stream(1, "s", CONNECTOR)
        child = subprocess.Popen(
            [sys.executable, "-c", READER_SCRIPT, str(path), str(done)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            for i in range(3000):
                lg.append(ConnectorMessage.build(1, b"p" * (i % 50), message_id=i))
                if i % 7 == 6:
                    lg.commit()
            lg.commit()
            done.touch()
            out, err = child.communicate(timeout=90)
        finally:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    last_end, reads = map(int, out.split())
    assert last_end == 3000 and reads >= 1


def test_stream_metadata_keeps_its_mode_and_reads_the_older_ordered_flag() -> None:
    meta = StreamMeta(5, "s", CONNECTOR, Mode.UNRELIABLE)
    assert StreamMeta.from_json(meta.to_json()) == meta
    old = b'{"stream_id": 5, "stream_name": "s", "connector": "c/1", "ordered": false}'
    assert StreamMeta.from_json(old).mode is Mode.UNORDERED
    assert StreamMeta.from_json(old.replace(b"false", b"true")).mode is Mode.ORDERED


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_thousands_of_streams_hold_a_bounded_number_of_files_open(tmp_path: Path) -> None:
    """Scale: descriptors follow max_open_streams, not the number of streams, also after a reopen."""
    path = tmp_path / "log"
    before = _open_descriptors()
    with DurableLog(path, max_open_streams=8) as lg:
        for sid in range(300):
            lg.open_stream(sid, f"s{sid}", CONNECTOR)
            lg.append(ConnectorMessage.build(sid, b"a", message_id=0))
        lg.commit()
        for sid in range(0, 300, 7):  # older streams written again reopen their files
            lg.append(ConnectorMessage.build(sid, b"b", message_id=1))
        lg.commit()
        assert _open_descriptors() - before <= 2 * 8 + 4  # index + segment each, lock, I/O thread
    with DurableLog(path, max_open_streams=8) as lg:
        assert _open_descriptors() - before <= 4  # opening a log opens no stream's files
        assert lg.durable_end(7) == 2 and lg.durable_end(8) == 1
    assert [r["payload"] for r in rows(path, 14)] == [b"a", b"b"]


def test_max_open_streams_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(LogError, match="max_open_streams must be at least 1, got 0"):
        DurableLog(tmp_path / "log", max_open_streams=0)
