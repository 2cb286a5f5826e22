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
(:class:`~aqueduct.bridge.app.receiver.SparkBridge`) keep the listener.
"""

from __future__ import annotations

import os
from pathlib import Path

from aqueduct.bridge.storage.offset import SourceOffset

COMMITS = "commits"
OFFSETS = "offsets"


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


class CheckpointCommits:
    """Follows ``<checkpoint>/commits``: the positions of each batch Spark committed, once."""

    def __init__(self, checkpoint: Path) -> None:
        self.checkpoint = checkpoint
        self._next: int | None = None  # the batch id whose commit comes next

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
