"""The earliest commit signal: Spark's own commit log in the query's checkpoint.

Spark runs a micro-batch as: write ``offsets/N`` (what the batch reads),
run it and let the sink commit (``addBatch``), then write ``commits/N``,
then post query progress to listeners. So ``commits/N`` existing means the
sink committed batch ``N``, and ``offsets/N`` says which offsets that was.
The listener's progress event comes after both and reaches Python through
py4j, one JVM call per field of the progress it converts: on a busy core
that took 0.4-1.6 s after ``commits/N`` was written (see
docs/performance.md). Both files are written atomically (a temporary file
renamed into place), so a file that exists is whole.

:class:`CheckpointCommits` is polled by the bridge (a ``stat`` per poll
while records wait for a commit); it works for any sink, since the
commit log is Spark's, not the sink's. It needs the checkpoint's path, so
it serves the queries the bridge starts itself; queries a user starts
(:class:`~aqueduct.bridge.app.spark_bridge.SparkBridge`) keep the listener.

A file sink (the bridge's Parquet output) commits each batch in its own
log, ``<output>/_spark_metadata``, inside ``addBatch``: earlier still.
:meth:`CheckpointCommits.poll_sink` follows it, so producers are acked
the moment their records are in the sink; the log is truncated only
after the commit log (a restarted query reads that batch again).
"""

from __future__ import annotations

import os
from pathlib import Path

from aqueduct.bridge.storage.offset import SourceOffset

COMMITS = "commits"
OFFSETS = "offsets"
SINK_METADATA = "_spark_metadata"  # a file sink's own log, in its output directory


def _batch_ids(directory: Path) -> list[int]:
    try:
        return sorted(int(n) for n in os.listdir(directory) if n.isdigit())
    except FileNotFoundError:
        return []


def committed_positions(checkpoint: Path, batch: int) -> dict[int, int] | None:
    """The ``aqueduct`` positions batch ``batch`` read up to, from ``offsets/<batch>``.

    The file is ``v1``, the batch's metadata, then one line per source
    (``-`` for a source without an offset yet). Lines that do not parse as
    this source's offsets (another source of a joined query) are skipped;
    with several ``aqueduct`` sources their positions are merged.
    """
    try:
        lines = (checkpoint / OFFSETS / str(batch)).read_text().splitlines()
    except FileNotFoundError:
        return None
    positions: dict[int, int] = {}
    for line in lines[2:]:
        try:
            positions.update(SourceOffset.parse(line).stream_ids())
        except ValueError:  # not JSON ("-"), or another source's offsets
            continue
    return positions or None


def _mtime_ns(path: Path) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return None


class CheckpointCommits:
    """Follows ``<checkpoint>/commits``: the positions of each batch Spark committed, once.

    With ``sink`` (a file sink's own log, ``<output>/_spark_metadata``) it
    also follows the sink's commit of each batch (:meth:`poll_sink`).
    """

    def __init__(self, checkpoint: Path, sink: Path | None = None) -> None:
        self.checkpoint = checkpoint
        self.sink = sink
        self._next: int | None = None  # the batch id whose commit comes next
        self._sink_next = 0  # the batch id whose sink commit comes next

    def poll(self) -> dict[int, int] | None:
        """Positions of the newest batch committed since the last poll, or None.

        One ``stat`` when nothing new was committed. The first poll (or one
        after the log was purged past what it expected) lists the directory.
        """
        commits = self.checkpoint / COMMITS
        if self._next is not None and not os.path.exists(commits / str(self._next)):
            return None
        ids = _batch_ids(commits)
        if not ids or (self._next is not None and ids[-1] < self._next):
            if self._next is None:
                self._next = 0
            return None
        newest = ids[-1]
        self._next = newest + 1
        return committed_positions(self.checkpoint, newest)

    @property
    def trailing(self) -> bool:
        """The sink committed a batch the commit log has not recorded yet (its truncation waits)."""
        return self._next is not None and self._sink_next > self._next

    def poll_sink(self) -> dict[int, int] | None:
        """Positions of the next batch the file sink committed, before the commit log says so, or None.

        A file sink commits batch ``N`` by writing ``N`` (every tenth
        batch ``N.compact``) into its ``_spark_metadata`` log, inside the
        batch; the commit log follows after Spark's ``commitOffsets`` step
        (about 0.1 s later on the benchmark machine). A query stopped in
        between runs the batch again on restart and the sink skips it, so
        its records are in the sink exactly once from that moment. A sink
        log entry older than the batch's ``offsets/N`` is another query's
        (an output directory reused with a new checkpoint): not a commit.
        One or two ``stat`` calls while nothing new was committed; batches
        the commit log already reported are not looked at again.
        """
        if self.sink is None or self._next is None:
            return None
        batch = max(self._sink_next, self._next)
        written = _mtime_ns(self.sink / str(batch))
        if written is None:
            written = _mtime_ns(self.sink / f"{batch}.compact")
        planned = None if written is None else _mtime_ns(self.checkpoint / OFFSETS / str(batch))
        if written is None or planned is None or written < planned:
            return None
        self._sink_next = batch + 1
        return committed_positions(self.checkpoint, batch)
