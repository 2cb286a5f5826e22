"""The output verifier catches what it claims to catch.

Spark's file-sink layout is written here by hand (part files plus the
``_spark_metadata`` log in Spark's text format) so that each kind of broken
output can be produced on purpose; the Spark tests check real output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from demo.verify import verify_output


class SinkDir:
    """An output directory with a metadata log, batch by batch."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "_spark_metadata").mkdir(parents=True)
        self.files = 0

    def part(self, rows: list[tuple[int, int, int]], payloads: list[bytes] | None = None) -> Path:
        """Write a part file of (stream id, message id, epoch) rows; return its path.

        Each row carries the payload :func:`sent` says unless ``payloads`` gives others.
        """
        self.files += 1
        path = self.root / f"part-{self.files:05d}.snappy.parquet"
        sid, mid, epoch = zip(*rows, strict=True) if rows else ((), (), ())
        if payloads is None:
            payloads = [sent(s, m) for s, m, _ in rows]
        table = pa.table(
            {
                "stream_id": pa.array(sid, pa.int64()),
                "message_id": pa.array(mid, pa.int64()),
                "payload": pa.array(payloads, pa.binary()),
                "epoch": pa.array(epoch, pa.int64()),
            }
        )
        pq.write_table(table, path)
        return path

    def batch(self, batch_id: int, *parts: Path, suffix: str = "") -> None:
        entries = [
            json.dumps({"path": p.as_uri(), "size": p.stat().st_size, "isDir": False, "action": "add"})
            for p in parts
        ]
        (self.root / "_spark_metadata" / f"{batch_id}{suffix}").write_text("\n".join(["v1", *entries]))


def sent(stream_id: int, message_id: int) -> bytes:
    return b"stream %d message %d" % (stream_id, message_id)


EXPECTED = {sid: {mid: sent(sid, mid) for mid in ids} for sid, ids in {1: [0, 1, 2, 3], 2: [0, 1]}.items()}


def good_output(root: Path) -> SinkDir:
    sink = SinkDir(root)
    sink.batch(0, sink.part([(1, 0, 0), (1, 1, 0)]), sink.part([(2, 0, 0)]))
    sink.batch(1, sink.part([(1, 2, 1), (1, 3, 1)]), sink.part([(2, 1, 1)]))
    return sink


def test_complete_output_passes_and_stray_files_are_ignored(tmp_path: Path) -> None:
    sink = good_output(tmp_path)
    sink.part([(1, 0, 0)])  # written by a batch that crashed before its log entry
    result = verify_output(tmp_path, EXPECTED)
    assert result.ok, result.problems()
    assert (result.rows, result.batches, result.streams) == (6, 2, 2)


def test_a_batch_written_twice_is_reported_as_duplicates(tmp_path: Path) -> None:
    sink = good_output(tmp_path)
    sink.batch(2, sink.part([(1, 2, 1), (1, 3, 1)]))
    result = verify_output(tmp_path, EXPECTED)
    assert not result.ok
    assert result.duplicates == 2
    assert result.out_of_order_streams == 1
    assert "2 duplicate messages" in result.problems()


def test_missing_and_unexpected_messages_are_reported(tmp_path: Path) -> None:
    sink = SinkDir(tmp_path)
    sink.batch(0, sink.part([(1, 0, 0), (1, 1, 0), (1, 3, 1), (2, 0, 0), (2, 1, 0), (2, 7, 1)]))
    result = verify_output(tmp_path, EXPECTED)
    assert (result.missing, result.unexpected) == (1, 1)
    assert result.examples["missing"] == [[1, 2]]
    assert result.examples["unexpected"] == [[2, 7]]


def test_right_ids_with_wrong_bytes_are_reported(tmp_path: Path) -> None:
    sink = SinkDir(tmp_path)
    rows = [(1, 0, 0), (1, 1, 0), (1, 2, 1), (1, 3, 1), (2, 0, 0), (2, 1, 1)]
    payloads = [sent(s, m) for s, m, _ in rows]
    payloads[2] = b"stream 1 message 2 but corrupted"
    payloads[5] = b""
    sink.batch(0, sink.part(rows, payloads))
    result = verify_output(tmp_path, EXPECTED)
    assert not result.ok
    assert (result.rows, result.missing, result.duplicates, result.wrong_payloads) == (6, 0, 0, 2)
    assert result.examples["wrong_payloads"] == [[1, 2], [2, 1]]
    assert "2 rows with a payload other than the one sent" in result.problems()


def test_an_epoch_split_across_micro_batches_is_reported(tmp_path: Path) -> None:
    sink = SinkDir(tmp_path)
    sink.batch(0, sink.part([(1, 0, 0), (1, 1, 0), (1, 2, 1)]), sink.part([(2, 0, 0), (2, 1, 0)]))
    sink.batch(1, sink.part([(1, 3, 1)]))
    result = verify_output(tmp_path, EXPECTED)
    assert result.split_epochs == 1
    assert result.examples["split_epochs"] == [[1, 1]]


def test_compacted_metadata_logs_are_read(tmp_path: Path) -> None:
    sink = SinkDir(tmp_path)
    first = sink.part([(1, 0, 0), (1, 1, 0), (2, 0, 0)])
    sink.batch(0, first, suffix=".compact")
    sink.batch(1, sink.part([(1, 2, 1), (1, 3, 1), (2, 1, 1)]))
    result = verify_output(tmp_path, EXPECTED)
    assert result.ok, result.problems()
    assert result.batches == 1  # batch 0 is only known from the compact file


def test_no_output_at_all_is_everything_missing(tmp_path: Path) -> None:
    result = verify_output(tmp_path, EXPECTED)
    assert (result.rows, result.missing) == (0, 6)
    assert not result.ok
