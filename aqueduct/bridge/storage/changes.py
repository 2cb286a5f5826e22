"""Which streams changed: a journal the log writer appends and readers follow.

A reader that plans micro-batches (Spark's planner worker, ``status``)
asks for the state of every stream again and again. Re-reading, or even
``stat``-ing, thousands of quiet streams on every question makes planning
cost grow with the stream count. So the writer appends the id of every
stream whose index or metadata it changed (a group commit, a new stream, a
truncation) to ``LOG/changes``, as 8-byte little-endian integers, *after*
the change is on disk; a reader remembers how far it read and reloads only
the streams named since. The file starts with an 8-byte generation number
(unique per journal), so a reader can tell a replaced journal from the one
it followed even when the file system reuses the inode number.

The journal is a hint, never the truth: the indexes are. A reader rescans
everything when it cannot trust what it would skip: on its first look,
when the journal was replaced (the writer starts a fresh one when it
opens the log, so changes a crashed writer never journaled cannot hide,
and when the journal grows past :data:`MAX_JOURNAL_BYTES`), and at least
every :data:`RESCAN_SECONDS` as a safety net.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterable
from pathlib import Path

CHANGES_FILE = "changes"

#: The journal is replaced by an empty one beyond this size (readers then rescan once).
MAX_JOURNAL_BYTES = 1 << 20

#: A reader rescans every stream at least this often, whatever the journal says.
RESCAN_SECONDS = 30.0

_ID = struct.Struct("<Q")  # stream ids use all 64 bits


class ChangeJournal:
    """The writer's side: append the ids of changed streams (one thread only: the log's I/O thread)."""

    def __init__(self, path: Path, max_bytes: int = MAX_JOURNAL_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._fd = -1
        self._size = 0
        self._stale = False  # a note may be missing or torn: start a fresh journal
        self._start_fresh()

    def _start_fresh(self) -> None:
        """Replace the journal with an empty one of a new generation (readers notice and rescan)."""
        tmp = self.path.with_name(self.path.name + ".new")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            if os.write(fd, _ID.pack(time.time_ns())) != _ID.size:
                raise OSError(f"{tmp}: short write")
            os.replace(tmp, self.path)
        except OSError:
            os.close(fd)
            raise
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._size = fd, _ID.size

    def record(self, stream_ids: Iterable[int]) -> None:
        """Note that these streams changed (call after the change is durable).

        Never raises: the change it reports is on disk already, and a failed
        note (a full disk) must not fail it. A journal that may have lost or
        torn a note is replaced by a fresh one at the next note that can be
        written, so readers rescan (they also do every :data:`RESCAN_SECONDS`).
        """
        data = b"".join(_ID.pack(sid) for sid in stream_ids)
        if not data:
            return
        try:
            if self._stale or self._size + len(data) > self.max_bytes:
                self._start_fresh()
                self._stale = False
            written = os.write(self._fd, data)
        except OSError:
            self._stale = True
            return
        self._size += written
        if written < len(data):  # a torn note: the ids after it would be misread
            self._stale = True

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class ChangeReader:
    """A reader's side: which streams changed since the previous :meth:`poll`."""

    def __init__(self, path: Path, rescan_seconds: float = RESCAN_SECONDS) -> None:
        self.path = path
        self.rescan_seconds = rescan_seconds
        self._generation: int | None = None
        self._offset = 0
        self._rescanned_at = float("-inf")

    def poll(self) -> set[int] | None:
        """Ids of streams changed since the last poll, or None: rescan every stream."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return self._rescan(None)
        try:
            header = os.pread(fd, _ID.size, 0)
            generation = _ID.unpack(header)[0] if len(header) == _ID.size else None
            now = time.monotonic()
            if generation is None or generation != self._generation or now - self._rescanned_at > self.rescan_seconds:
                # Everything is reloaded now: changes already journaled are covered.
                self._offset = os.lseek(fd, 0, os.SEEK_END) // _ID.size * _ID.size
                return self._rescan(generation)
            os.lseek(fd, self._offset, os.SEEK_SET)
            data = b""
            while chunk := os.read(fd, 1 << 20):
                data += chunk
        finally:
            os.close(fd)
        whole = len(data) // _ID.size * _ID.size  # an append in progress is read next time
        self._offset += whole
        return {sid for (sid,) in _ID.iter_unpack(data[:whole])}

    def _rescan(self, generation: int | None) -> None:
        self._generation = generation
        self._rescanned_at = time.monotonic()
        return None
