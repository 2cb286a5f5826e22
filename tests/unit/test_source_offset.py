"""The ``aqueduct`` source's offset: one parser for every reader, one error for every malformed offset.

The offsets parsed here are written exactly as the files on disk hold them
today (a Spark 4.3 checkpoint's ``offsets/N``, a source's commit file), so an
old checkpoint keeps parsing as the type changes.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from aqueduct.bridge.app.commit_log import committed_positions
from aqueduct.bridge.storage.acked import read_acked, write_acked
from aqueduct.bridge.storage.commits import commit_file, read_committed
from aqueduct.bridge.storage.offset import OffsetError, SourceOffset

#: ``offsets/0`` of a checkpoint as Spark 4.3 wrote it for an aqueduct query (conf cut short).
CHECKPOINT_OFFSETS = (
    "v1\n"
    '{"batchWatermarkMs":0,"batchTimestampMs":1795665411083,"conf":{"spark.sql.shuffle.partitions":"2"}}\n'
    '{"2": 1, "10": 4}'
)
#: The same for a query over two logs (keys name the log).
QUALIFIED_LINE = '{"eu/1000": 123, "eu/1001": 123, "us/2000": 123, "us/2001": 123}'
#: ``<log>/commits/default.json`` as the source writes it today.
COMMIT_FILE = '{"offsets": {"1": 72}, "crc32c": 2448512571, "committed_at": 1795665412.8974316, "skipped_records": 0}'

SHAPE = 'aqueduct offset: expected a JSON object {"<stream id>": <position>, ...} with non-negative integer positions'


def test_a_checkpoints_offsets_as_written_today_parse_and_serialise_back_unchanged(tmp_path: Path) -> None:
    line = CHECKPOINT_OFFSETS.splitlines()[2]
    offset = SourceOffset.parse(line)
    assert offset.positions == {2: 1, 10: 4}
    assert offset.json() == line  # Spark compares offsets as text: the round trip is exact
    assert SourceOffset.parse(json.loads(line)) == offset  # the dict pyspark hands the reader
    qualified = SourceOffset.parse(QUALIFIED_LINE, qualified=True)
    assert qualified.positions[("us", 2001)] == 123 and qualified.json() == QUALIFIED_LINE
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text(CHECKPOINT_OFFSETS)
    assert committed_positions(tmp_path, 0) == {2: 1, 10: 4}


def test_a_commit_file_as_written_today_reads_back(tmp_path: Path) -> None:
    path = commit_file(tmp_path, "default")
    path.parent.mkdir()
    path.write_text(COMMIT_FILE)
    assert read_committed(tmp_path, "default") == {1: 72}
    path.write_text('{"offsets": {"1": 72}}')  # written before checksums
    assert read_committed(tmp_path, "default") == {1: 72}


def test_keys_are_canonical_whatever_order_they_came_in() -> None:
    a = SourceOffset({10: 4, 2: 1})
    assert list(a.spark()) == ["2", "10"] and a == SourceOffset({2: 1, 10: 4})
    assert hash(a) == hash(SourceOffset({2: 1, 10: 4}))
    assert list(SourceOffset({("us", 1): 0, ("eu", 2): 0}).spark()) == ["eu/2", "us/1"]
    assert pickle.loads(pickle.dumps(a)) == a


def test_an_offset_cannot_be_changed() -> None:
    offset = SourceOffset({1: 5})
    with pytest.raises(TypeError):
        offset.positions[1] = 6  # type: ignore[index]
    with pytest.raises(AttributeError):
        offset.positions = {}  # type: ignore[misc]


@pytest.mark.parametrize(
    ("offset", "got"),
    [
        ('{"a": 5}', "'a': 5"),
        ('{"1": -1}', "'1': -1"),
        ('{"1": 2.5}', "'1': 2.5"),
        ('{"1": true}', "'1': True"),
        ('{"1": "5"}', "'1': '5'"),
        ('{"eu/1": 5}', "'eu/1': 5"),  # a key of a query over several logs, read as one log's
        ('{"\\u00b2": 5}', "'\u00b2': 5"),  # a digit to str.isdigit, not to int()
        ('{"topic": {"0": 5}}', "'topic': {'0': 5}"),  # a Kafka source's offset in the same checkpoint
        ("[1]", "[1]"),
        ("17", "17"),
        ("-", "'-'"),  # Spark's line for a source without an offset yet
    ],
)
def test_a_malformed_offset_gets_the_one_error(offset: str, got: str) -> None:
    with pytest.raises(OffsetError) as raised:
        SourceOffset.parse(offset)
    assert str(raised.value) == f"{SHAPE}, got {got}"


def test_a_query_over_several_logs_needs_named_keys() -> None:
    with pytest.raises(OffsetError) as raised:
        SourceOffset.parse({"1": 5}, qualified=True)
    assert str(raised.value) == (
        'aqueduct offset: expected a JSON object {"<log name>/<stream id>": <position>, ...} '
        "with non-negative integer positions, got '1': 5"
    )
    with pytest.raises(OffsetError, match="keys name several logs"):
        SourceOffset({("eu", 1): 5}).stream_ids()


def test_acked_offsets_go_through_the_same_type(tmp_path: Path) -> None:
    write_acked(tmp_path, {10: 4, 2: 1})
    assert json.loads((tmp_path / "acked.json").read_text())["offsets"] == {"2": 1, "10": 4}
    assert read_acked(tmp_path) == {2: 1, 10: 4}
