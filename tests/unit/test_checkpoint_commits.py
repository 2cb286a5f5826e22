"""Following Spark's commit log: each committed batch's positions, once, from the checkpoint files.

The files are written here in the shape Spark 4.3 writes them (``v1``, the
batch metadata, one line per source); the bridge following a real query's
checkpoint is covered by tests/spark/test_bridge_exactly_once.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from aqueduct.bridge.app.commit_log import CheckpointCommits, committed_positions

META = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}}


def offsets(checkpoint: Path, batch: int, *sources: object) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    lines = ["v1", json.dumps(META), *(s if isinstance(s, str) else json.dumps(s) for s in sources)]
    (checkpoint / "offsets" / str(batch)).write_text("\n".join(lines))


def commit(checkpoint: Path, batch: int) -> None:
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_a_batch_counts_only_once_its_commit_is_written(tmp_path: Path) -> None:
    follower = CheckpointCommits(tmp_path)
    assert follower.poll() is None  # no checkpoint yet
    offsets(tmp_path, 0, {"1": 4, "2": 8})
    assert follower.poll() is None  # planned and running, not committed
    commit(tmp_path, 0)
    assert follower.poll() == {1: 4, 2: 8}
    assert follower.poll() is None  # reported once
    offsets(tmp_path, 1, {"1": 12, "2": 8})
    offsets(tmp_path, 2, {"1": 16, "2": 8})
    assert follower.poll() is None
    commit(tmp_path, 1)
    commit(tmp_path, 2)
    assert follower.poll() == {1: 16, 2: 8}  # the newest committed batch covers the ones before


def test_a_restarted_bridge_starts_from_the_newest_commit_on_disk(tmp_path: Path) -> None:
    for batch, end in enumerate((4, 8, 12)):
        offsets(tmp_path, batch, {"1": end})
        commit(tmp_path, batch)
    offsets(tmp_path, 3, {"1": 16})  # planned before the restart, never committed
    follower = CheckpointCommits(tmp_path)
    assert follower.poll() == {1: 12}
    assert follower.poll() is None


def test_other_sources_of_the_query_are_skipped(tmp_path: Path) -> None:
    offsets(tmp_path, 0, {"topic": {"0": 5}}, "-", 17, {"3": 9})
    assert committed_positions(tmp_path, 0) == {3: 9}
    offsets(tmp_path, 1, {"topic": {"0": 5}})
    assert committed_positions(tmp_path, 1) is None  # no aqueduct offsets: nothing to ack
    assert committed_positions(tmp_path, 7) is None


def sink_commit(output: Path, batch: int, compact: bool = False) -> None:
    (output / "_spark_metadata").mkdir(parents=True, exist_ok=True)
    (output / "_spark_metadata" / (f"{batch}.compact" if compact else str(batch))).write_text("v1\n")


def test_a_file_sinks_commit_counts_before_the_commit_log_and_once(tmp_path: Path) -> None:
    checkpoint, output = tmp_path / "ck", tmp_path / "out"
    follower = CheckpointCommits(checkpoint, sink=output / "_spark_metadata")
    assert follower.poll() is None and follower.poll_sink() is None
    offsets(checkpoint, 0, {"1": 4})
    assert follower.poll_sink() is None  # running, not in the sink yet
    sink_commit(output, 0)
    assert follower.poll_sink() == {1: 4}
    assert follower.trailing  # the commit log has yet to record it (truncation waits for it)
    assert follower.poll_sink() is None  # reported once
    commit(checkpoint, 0)
    assert follower.poll() == {1: 4} and not follower.trailing
    offsets(checkpoint, 1, {"1": 9})
    sink_commit(output, 1, compact=True)  # every tenth batch the sink compacts its log
    assert follower.poll_sink() == {1: 9}


def test_a_sink_log_entry_older_than_the_batch_is_no_commit_of_it(tmp_path: Path) -> None:
    """An output directory reused with a new checkpoint holds another query's batch 0."""
    checkpoint, output = tmp_path / "ck", tmp_path / "out"
    sink_commit(output, 0)
    old = (output / "_spark_metadata" / "0").stat().st_mtime_ns
    follower = CheckpointCommits(checkpoint, sink=output / "_spark_metadata")
    follower.poll()
    offsets(checkpoint, 0, {"1": 4})
    os.utime(output / "_spark_metadata" / "0", ns=(old - 10**9, old - 10**9))
    assert follower.poll_sink() is None
    commit(checkpoint, 0)
    assert follower.poll() == {1: 4}  # the commit log still acks it


def test_without_a_sink_log_only_the_commit_log_counts(tmp_path: Path) -> None:
    follower = CheckpointCommits(tmp_path)
    follower.poll()
    offsets(tmp_path, 0, {"1": 4})
    assert follower.poll_sink() is None and not follower.trailing
