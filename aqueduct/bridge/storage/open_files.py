"""Which streams keep their files open between group commits: a least-recently-written cache.

A log holds thousands of streams; keeping every one's index and segment
open would spend the process's descriptors (the bridge also needs one per
connection). Streams written to recently stay open; the others are closed
and reopen on their next write (:meth:`StreamFiles.open_files
<aqueduct.bridge.storage.stream_files.StreamFiles.open_files>`).
I/O thread only.
"""

from __future__ import annotations

from collections import OrderedDict

from aqueduct.bridge.storage.stream_files import StreamFiles

DEFAULT_MAX_OPEN_STREAMS = 512
"""Streams whose index and segment stay open between group commits (2 descriptors each)."""


class OpenFiles:
    """The streams whose files are open, least recently written first, at most ``limit`` after :meth:`trim`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: OrderedDict[int, StreamFiles] = OrderedDict()

    def use(self, stream_id: int, files: StreamFiles) -> None:
        """Open the stream's files if they are closed, and mark them the most recently written."""
        files.open_files()
        self._open[stream_id] = files
        self._open.move_to_end(stream_id)

    def forget(self, stream_id: int) -> None:
        """The stream closed its files itself (a rolled back commit)."""
        self._open.pop(stream_id, None)

    def trim(self) -> None:
        """Close the least recently written streams' files beyond the limit."""
        while len(self._open) > self.limit:
            _, idle = self._open.popitem(last=False)
            idle.close()

    def clear(self) -> None:
        """Forget every stream (the log closes them all)."""
        self._open.clear()
