"""One stream's files, as the log's I/O thread writes them: segments, index, creation, truncation, recovery.

Everything here runs on the log's single I/O thread (or while the log
opens, before it has one), in order with every other file write: a
stream's directory and metadata are created, its sealed batches written to
the last segment and indexed, torn bytes of a failed group commit cut off,
whole segments truncated. The index is the only source of truth: a batch
exists once its entry is synced and added to :attr:`StreamFiles.entries`.
The records path (the event loop's appends) never touches these files.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from aqueduct.bridge.storage.durability import SyncGroup, fsync_path
from aqueduct.bridge.storage.index import (
    ENTRY_SIZE,
    MAGIC,
    IndexEntry,
    encode_entry,
    is_current,
    read_entries,
    rewrite_index,
    write_atomically,
)
from aqueduct.bridge.storage.pending import Sealed
from aqueduct.bridge.storage.received import carry_received_ids
from aqueduct.bridge.storage.segment import SegmentWriter, segment_bases, segment_name, write_all
from aqueduct.bridge.storage.view import INDEX_FILE, META_FILE, StreamMeta


class StreamFiles:
    """The files of one stream partition: its index entries, the last segment and the index, open or not.

    A stream :class:`~aqueduct.bridge.storage.open_files.OpenFiles` keeps
    open holds its segment and index between group commits
    (:meth:`open_files`); any other is opened for one commit's write and
    closed after it (:meth:`write`, :meth:`add_segment_to`, :meth:`write_entry`).
    """

    def __init__(self, directory: Path, entries: list[IndexEntry]) -> None:
        self.directory = directory
        self._dir = str(directory)  # for the opens of a group commit: pathlib's joins cost more than they do
        self._index_path = os.path.join(self._dir, INDEX_FILE)
        #: the committed batches, in order: appended only after their index entry is synced
        self.entries = entries
        self.segment: SegmentWriter | None = None
        self._index_fd = -1  # opened on the I/O thread while OpenFiles keeps the stream open
        #: the stream's directory, metadata and index exist (False until created on the I/O thread)
        self.created = True
        self._new_files: list[str] = []  # names write_new_files wrote under temporary names

    def open_files(self) -> None:
        """Open the index for appending and the last segment to go on, to keep them open (I/O thread).

        Reopening the last segment cuts any torn tail a crash left after its
        last indexed batch (see :class:`~aqueduct.bridge.storage.segment.SegmentWriter`).
        """
        if self._index_fd >= 0:
            return
        self._open_segment()
        self._index_fd = os.open(self._index_path, os.O_WRONLY | os.O_APPEND)

    def _open_segment(self) -> None:
        if self.entries and self.segment is None:
            last = self.entries[-1]
            self.segment = SegmentWriter(self._dir, last.segment, last.position + last.length)

    def check_files(self) -> None:
        """At open: the last segment must hold what the index says (fail now, not at a commit)."""
        if self.entries:
            last = self.entries[-1]
            path = self.directory / segment_name(last.segment)
            size = path.stat().st_size if path.exists() else 0
            if size < last.position + last.length:
                raise OSError(
                    f"segment {path} is shorter than its index says "
                    f"({last.position + last.length} bytes)"
                )

    # ------------------------------------------------------------ creation

    def write_new_files(self, meta: StreamMeta, group: SyncGroup) -> None:
        """Create a new stream's directory, with its metadata and empty index under
        temporary names, for ``group`` to sync (I/O thread); :meth:`name_new_files` follows.

        Until the renames, a crash leaves a directory without metadata,
        which opening the log ignores and a later creation reuses. An index
        that exists already is never replaced: a re-NOTIFY that found the
        stream still being created queues it again, and by the time that
        runs, a group commit may have indexed records in it.
        """
        self.directory.mkdir(exist_ok=True)
        files = [(META_FILE, meta.to_json())]
        if not (self.directory / INDEX_FILE).exists():
            files.append((INDEX_FILE, MAGIC))
        self._new_files = [name for name, _ in files]
        for name, data in files:
            tmp = self.directory / (name + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, data)
            finally:
                os.close(fd)
            group.add_path(tmp)

    def name_new_files(self, group: SyncGroup) -> None:
        """Give the synced new files their names, for ``group`` to sync the directory."""
        for name in self._new_files:
            os.replace(self.directory / (name + ".tmp"), self.directory / name)
        group.add_dir(self.directory)

    # ------------------------------------------------------------ a group commit's share

    def write(self, sealed: Sealed, batch: pa.RecordBatch, segment_bytes: int) -> IndexEntry:
        """Write a sealed share's batch to the segment, not yet synced (I/O thread); return its entry.

        Opens the last segment if it is closed; :meth:`add_segment_to` follows.
        """
        self._open_segment()
        if self.segment is None or self.segment.size >= segment_bytes:
            if self.segment is not None:
                self.segment.sync()
                self.segment.close()
            self.segment = SegmentWriter(self._dir, sealed.first_offset, None)
        p = sealed.pending
        position, length, checksum = self.segment.append(batch)
        return IndexEntry(
            segment=self.segment.base,
            position=position,
            length=length,
            first_offset=sealed.first_offset,
            count=len(p.payload),
            reference_before=p.reference_before,
            reference_after=sealed.reference_after,
            complete_after=sealed.complete_after,
            first_epoch=p.epoch[0],
            last_epoch=p.epoch[-1],
            next_epoch=sealed.next_epoch,
            uses_boundaries=sealed.uses_boundaries,
            written_at_us=sealed.written_at_us,
            checksum=checksum,
        )

    def add_segment_to(self, group: SyncGroup, *, keep_open: bool) -> None:
        """Have ``group`` sync what :meth:`write` wrote; unless ``keep_open``, close the segment now.

        A closed segment is synced by name and reopens at its next write,
        from the index entries (which by then include this commit's).
        """
        assert self.segment is not None
        self.segment.add_to(group, closing=not keep_open)
        if not keep_open:
            self.segment.close()
            self.segment = None

    def write_entry(self, entry: IndexEntry, group: SyncGroup) -> None:
        """Append the index entry, for ``group`` to sync (I/O thread).

        Through the open index of a stream kept open; else the index is
        opened for this entry alone and synced by name. The batch becomes
        visible only when the caller adds the entry to :attr:`entries`,
        after the sync.
        """
        if self._index_fd >= 0:
            write_all(self._index_fd, encode_entry(entry))
            group.add_file(self._index_fd)
            return
        fd = os.open(self._index_path, os.O_WRONLY | os.O_APPEND)
        try:
            write_all(fd, encode_entry(entry))
        finally:
            os.close(fd)
        group.add_path(self._index_path)

    def roll_back(self) -> None:
        """Forget the bytes a failed group commit wrote for this stream (I/O thread).

        None of them is indexed yet: the index is cut back to the synced
        entries, the last segment to its last indexed batch, and a segment
        the attempt created is removed, which also gives the space back.
        """
        self.close()
        index = self.directory / INDEX_FILE
        size = len(MAGIC) + len(self.entries) * ENTRY_SIZE
        if index.stat().st_size > size:
            os.truncate(index, size)
        kept = {e.segment for e in self.entries}
        for base in segment_bases(self.directory):
            if base not in kept:
                (self.directory / segment_name(base)).unlink()
        if self.entries:
            last = self.entries[-1]
            os.truncate(self.directory / segment_name(last.segment), last.position + last.length)

    # ------------------------------------------------------------ truncation

    def has_closed_segments(self) -> bool:
        """True if some entry lies in a segment no longer appended to (truncation could drop it)."""
        entries = self.entries
        return bool(entries) and entries[0].segment != entries[-1].segment

    def drop_segments_below(self, meta: StreamMeta, below_offset: int, keep_after_us: int) -> int:
        """Drop whole segments ending at or below ``below_offset``; return the new earliest."""
        if not self.entries:
            return 0
        active = self.entries[-1].segment
        drop: set[int] = set()
        by_segment: dict[int, list[IndexEntry]] = {}
        for e in self.entries:
            by_segment.setdefault(e.segment, []).append(e)
        for base, es in by_segment.items():
            if base == active or es[-1].end_offset > below_offset:
                break
            if es[-1].written_at_us > keep_after_us:
                break
            drop.add(base)
        if drop:
            carry_received_ids(meta, self.directory, self.entries, drop)
            kept = [e for e in self.entries if e.segment not in drop]
            if self._index_fd >= 0:  # reopened on the next write: rewriting may fail (a full disk)
                os.close(self._index_fd)
                self._index_fd = -1
            rewrite_index(self.directory / INDEX_FILE, kept)
            self.entries = kept  # only now: on failure the old index, and these entries, still stand
            for base in drop:
                (self.directory / segment_name(base)).unlink(missing_ok=True)
            fsync_path(self.directory)
        return self.entries[0].first_offset

    def close(self) -> None:
        """Release the stream's files (it reopens them on its next write)."""
        if self.segment is not None:
            self.segment.close()
            self.segment = None
        if self._index_fd >= 0:
            os.close(self._index_fd)
            self._index_fd = -1


def recover_stream(directory: Path) -> tuple[StreamMeta, list[IndexEntry]]:
    """Cut a stream directory back to what its index vouches for (while the log opens)."""
    meta = StreamMeta.from_json((directory / META_FILE).read_bytes())
    index_path = directory / INDEX_FILE
    entries, valid = read_entries(index_path)
    size = index_path.stat().st_size if index_path.exists() else 0
    if valid < len(MAGIC):
        write_atomically(index_path, MAGIC)
    elif not is_current(index_path):  # written before checksums: their batches stay unchecked
        rewrite_index(index_path, entries)
    elif size > valid:
        with open(index_path, "r+b") as f:
            f.truncate(valid)
            os.fsync(f.fileno())
    kept = {e.segment for e in entries}
    orphans = [base for base in segment_bases(directory) if base not in kept]
    for base in orphans:
        (directory / segment_name(base)).unlink()
    if orphans:  # only then: an fsync per stream would make opening a big log slow
        fsync_path(directory)
    return meta, entries
