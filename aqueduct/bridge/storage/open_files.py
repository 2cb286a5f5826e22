"""Which streams keep their files open between group commits: a bounded cache that does not thrash.

A log holds thousands of streams; keeping every one's index and segment
open would spend the process's descriptors (the bridge also needs one per
connection). At most ``limit`` streams stay open; a group commit opens
the files of any other stream it writes for that write alone and closes
them after it (:class:`~aqueduct.bridge.storage.stream_files.StreamFiles`).

Which streams stay open: those a commit writes that are open already,
then, while there is room, the others it writes; streams it does not write
make room, least recently written first. Plain LRU would thrash when a
fleet keeps more streams busy than ``limit`` (a reconnect storm's commits
touch all 2,000): each commit would close the streams the next one needs
and reopen all of them; here only the streams beyond the limit pay an
open per commit, and those kept stay kept. I/O thread only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from aqueduct.bridge.storage.stream_files import StreamFiles

DEFAULT_MAX_OPEN_STREAMS = 512
"""Streams whose index and segment stay open between group commits (2 descriptors each)."""


class OpenFiles:
    """The streams whose files are open, least recently written first, never more than ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: OrderedDict[int, StreamFiles] = OrderedDict()

    def keep(self, written: Iterable[tuple[int, StreamFiles]]) -> set[int]:
        """Open the files of the streams a commit writes that stay open; return their ids.

        ``written``: each stream the commit writes, once. Streams it does not
        write are closed, least recently written first, as far as the new
        ones need room. The files of the streams not returned are the
        commit's to open and close.
        """
        written = dict(written)
        kept = [sid for sid in written if sid in self._open]
        room = self.limit - len(kept)
        new = [sid for sid in written if sid not in self._open][: max(room, 0)]
        beyond = len(self._open) + len(new) - self.limit
        if beyond > 0:
            for sid in [sid for sid in self._open if sid not in written][:beyond]:
                self._open.pop(sid).close()
        for sid in kept:
            self._open.move_to_end(sid)
        for sid in new:
            files = self._open[sid] = written[sid]
            files.open_files()
        return {*kept, *new}

    def forget(self, stream_id: int) -> None:
        """The stream closed its files itself (a rolled back commit)."""
        self._open.pop(stream_id, None)

    def clear(self) -> None:
        """Forget every stream (the log closes them all)."""
        self._open.clear()
