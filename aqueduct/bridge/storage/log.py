"""The bridge's durable log: one append-only partition per connector stream.

Layout of a log directory::

    FORMAT                      "aqueduct-log 1"
    LOCK                        flock'ed by the one writer process
    streams/<stream id>/
        meta.json               stream name, owning connector, id ordering
        received.json           dedup ids that only truncated segments held
        index                   CRC'd entries: the only source of truth
        <base offset>.arrow     Arrow IPC segments
    commits/<consumer>.json     offsets the Spark source committed

Appends accumulate in memory, column by column. A group commit
(:meth:`DurableLog.start_commit`, or the blocking :meth:`DurableLog.commit`)
seals each stream's pending records on the caller's thread, then, on the
log's own I/O thread, turns them into one Arrow record batch per stream,
writes it to the stream's segment, makes every touched segment durable,
then appends one index entry per stream and makes the indexes durable
(two syncs per commit however many streams it touches: one ``syncfs``
each beyond a few files, see :mod:`aqueduct.bridge.storage.durability`). New
streams' files are created in batches the same way. Only then are the records
visible (to readers, to :meth:`durable_reference`, and as credits for
producers). A crash at any point leaves a log whose index describes exactly
the batches that were fully written; on open, the writer cuts off whatever
lies beyond (torn batches, unindexed batches, orphan segments).

Threads: appends and questions come from one thread (the bridge's event
loop); every file write (group commits, truncation, close) runs in order on
the single I/O thread, so a truncation never interleaves with a commit and
the loop never blocks in fsync while the next group accumulates. The I/O
thread only adds index entries to a stream after their fsync (a record the
loop can see is always durable); it never touches the pending buffers, the
dedup sets or the points of reference of records not yet committed.

Each stream tracks, per record: its offset (record count), its epoch, and
the stream's point of reference after it; per stream: the received-id
range set used for deduplication, rebuilt on open from the retained
records, and the end of the last complete epoch.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

import pyarrow as pa

from aqueduct.bridge.storage.acked import write_acked
from aqueduct.bridge.storage.changes import CHANGES_FILE, ChangeJournal
from aqueduct.bridge.storage.corruption import record_corrupt
from aqueduct.bridge.storage.durability import SyncGroup, fsync_path
from aqueduct.bridge.storage.index import (
    ENTRY_SIZE,
    MAGIC,
    IndexCorrupt,
    IndexEntry,
    encode_entry,
    is_current,
    read_entries,
    rewrite_index,
    write_atomically,
)
from aqueduct.bridge.storage.schema import MAX_INT64, MAX_UINT64, STORED_SCHEMA, spark_stream_id
from aqueduct.bridge.storage.segment import (
    BatchCorrupt,
    SegmentWriter,
    segment_bases,
    segment_name,
    write_all,
)
from aqueduct.bridge.storage.view import (
    FORMAT_FILE,
    FORMAT_TEXT,
    INDEX_FILE,
    META_FILE,
    STREAMS_DIR,
    StreamIndex,
    StreamMeta,
    check_log_dir,
)
from aqueduct.connector.batch import MessageBatch
from aqueduct.connector.frames import BOUNDARY, EPHEMERAL, UNSTABLE_REFERENCE, ConnectorMessage
from aqueduct.connector.points import StreamPoints
from aqueduct.wire.modes import Mode
from aqueduct.wire.rangeset import RangeSet

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_OPEN_STREAMS = 512
"""Streams whose index and segment stay open between group commits (2 descriptors each).

A log holds thousands of streams; keeping every one's files open would
spend the process's descriptors (the bridge also needs one per connection).
Streams written to recently stay open; the others reopen on their next write.
"""

T = TypeVar("T")

logger = logging.getLogger(__name__)

_NO_STABLE_REFERENCE = EPHEMERAL | UNSTABLE_REFERENCE

#: Received-id ranges carried over from truncated segments (unordered streams).
CARRIED_FILE = "received.json"


class LogError(Exception):
    """A request the log cannot honour; the message says which rule it breaks."""


class LogLocked(LogError):
    """Another process already has this log open for writing."""


class DuplicateMessage(LogError):
    """A stable message id below the point of reference or already received."""


class LogFull(LogError):
    """A group commit found no room on the log's file system; it is held and retried.

    Nothing of the group is visible or half written: its bytes were cut off
    again, and the next commit writes it first. Space can come back (a
    consumer lets the log truncate, an operator frees some), so this is
    ridden out, not fatal.
    """


class LogFailed(LogError):
    """A write or sync failed for another reason than space: durability is unknown, the log stops.

    After a failed fsync the kernel may have dropped the dirty pages it could
    not write and report success on the next try (PostgreSQL's 2018 fsync
    lesson), so nothing written since the last good sync can be trusted.
    Every later commit raises this too; reopening the log recovers from
    what its indexes vouch for.
    """


#: errors a group commit rides out (retrying later) instead of failing the log
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT})


def _out_of_range(what: str, value: int) -> LogError:
    return LogError(f"{what} {value} is outside 0..2**63-1 (Spark long)")


@dataclass
class _Pending:
    """Records appended since the last commit, held as column lists."""

    message_id: list[int | None] = field(default_factory=list)
    event_time: list[int | None] = field(default_factory=list)
    key: list[bytes | None] = field(default_factory=list)
    payload: list[bytes] = field(default_factory=list)
    epoch: list[int] = field(default_factory=list)
    boundary: list[bool] = field(default_factory=list)
    stable: list[bool] = field(default_factory=list)
    reference: list[int] = field(default_factory=list)
    #: The stream's point of reference before the first of these records.
    reference_before: int = 0

    def to_batch(self, meta: StreamMeta) -> pa.RecordBatch:
        n = len(self.payload)
        f = STORED_SCHEMA.field
        columns = [
            pa.repeat(pa.scalar(spark_stream_id(meta.stream_id), pa.int64()), n),
            pa.repeat(pa.scalar(meta.stream_name, pa.string()), n),
            pa.array(self.message_id, f("message_id").type),
            pa.array(self.event_time, f("event_time").type),
            pa.array(self.key, f("key").type),
            pa.array(self.payload, f("payload").type),
            pa.repeat(pa.scalar(meta.connector, pa.string()), n),
            pa.array(self.epoch, pa.int64()),
            pa.array(self.boundary, pa.bool_()),
            pa.array(self.stable, pa.bool_()),
            pa.array(self.reference, pa.int64()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=STORED_SCHEMA)


@dataclass(frozen=True, slots=True)
class _Sealed:
    """One stream's share of a group commit, taken on the appending thread.

    The I/O thread needs the stream state *after* these records for the
    index entry; by the time it writes, the appending thread may have moved
    the live state on, so it is copied here.
    """

    pending: _Pending
    meta: StreamMeta  # as when sealed: a re-NOTIFY may rename the stream meanwhile
    first_offset: int
    reference_after: int
    complete_after: int
    next_epoch: int
    uses_boundaries: bool
    written_at_us: int


class _StreamWriter:
    """Writer-side state of one stream partition."""

    def __init__(
        self, directory: Path, meta: StreamMeta, entries: list[IndexEntry], pending_streams: set[_StreamWriter]
    ) -> None:
        self.directory = directory
        #: the log's streams with records pending: a group commit visits only those
        self._pending_streams = pending_streams
        self.meta = meta
        self.entries = entries
        last = entries[-1] if entries else None
        self.end = last.end_offset if last else 0
        self.complete = last.complete_after if last else 0
        self.next_epoch = last.next_epoch if last else 0
        self.uses_boundaries = last.uses_boundaries if last else False
        #: Dedup and point of reference (the rulebook shared with the sessions), as of
        #: every appended record, committed or pending.
        self.points = StreamPoints(
            meta.mode, self._rebuild_received(), last.reference_after if last else 0
        )
        self.pending = _Pending()
        self.segment: SegmentWriter | None = None
        self._index_fd = -1  # opened on the I/O thread when the stream is written to
        #: the stream's directory, metadata and index exist (False until created on the I/O thread)
        self.created = True
        self._new_files: list[str] = []  # names write_new_files wrote under temporary names

    @property
    def files_open(self) -> bool:
        return self._index_fd >= 0

    def open_files(self) -> None:
        """Open the index for appending and the last segment to go on (I/O thread).

        Files are open only while a stream is written to (see
        :attr:`DurableLog.max_open_streams`); reopening the last segment cuts
        any torn tail a crash left after its last indexed batch.
        """
        if self._index_fd >= 0:
            return
        if self.entries and self.segment is None:
            last = self.entries[-1]
            self.segment = SegmentWriter(self.directory, last.segment, last.position + last.length)
        self._index_fd = os.open(self.directory / INDEX_FILE, os.O_WRONLY | os.O_APPEND)

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

    def write_new_files(self, group: SyncGroup) -> None:
        """Create a new stream's directory, with its metadata and empty index under
        temporary names, for ``group`` to sync (I/O thread); :meth:`name_new_files` follows.

        Until the renames, a crash leaves a directory without metadata,
        which opening the log ignores and a later creation reuses. An index
        that exists already is never replaced: a re-NOTIFY that found the
        stream still being created queues it again, and by the time that
        runs, a group commit may have indexed records in it.
        """
        self.directory.mkdir(exist_ok=True)
        files = [(META_FILE, self.meta.to_json())]
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

    def _rebuild_received(self) -> RangeSet:
        """Ids below the oldest retained point of reference, ids carried over from
        truncated segments, and the retained stable ids."""
        received = RangeSet()
        if not self.entries:
            return received
        if self.entries[0].reference_before:
            received.add_range(0, self.entries[0].reference_before)
        for a, b in self._carried():
            received.add_range(a, b)
        for a, b in _received_ranges(self.view()):
            received.add_range(a, b)
        return received

    def _carried(self) -> list[tuple[int, int]]:
        """Received-id ranges that only truncated segments held (see truncation)."""
        try:
            return [(a, b) for a, b in json.loads((self.directory / CARRIED_FILE).read_bytes())]
        except FileNotFoundError:
            return []

    def snapshot(self) -> StreamIndex:
        """A read-only view of the committed records (a copy: later commits do not show)."""
        return StreamIndex(self.meta, self.directory, tuple(self.entries))

    def view(self) -> StreamIndex:
        """A view sharing the live entry list: O(1), for answering one question now."""
        return StreamIndex(self.meta, self.directory, self.entries)

    def is_duplicate(self, message_id: int) -> bool:
        return self.points.holds(message_id)

    def append(self, batch: MessageBatch) -> int:
        """Buffer a batch of this stream's records (see :meth:`DurableLog.append`); return the first one's offset.

        One step per batch: the records' values are checked (a run's by its
        first and last id, anything else record by record: :meth:`_check`),
        their ids go through the rulebook in one call,
        which takes a run of new ids at once, and the pending columns grow
        by extension, from the run's own columns when every record is new.
        ``batch.accepted`` marks the duplicates dropped. A record that
        breaks a rule raises :class:`LogError`; the records before it stay
        buffered, it and those after it are marked not accepted.
        """
        offset, points, p = self.end, self.points, self.pending
        n, run = len(batch.payloads), batch.flags is None
        good, error = n, None
        if run:  # a run's ids are consecutive, so its first and last tell
            times = [t for t in batch.event_times if t is not None]
            if batch.first_id < 0 or batch.first_id + n - 1 > MAX_INT64 or (
                times and (min(times) < 0 or max(times) > MAX_INT64)
            ):
                good, error = self._check(batch)
        else:
            good, error = self._check(batch)
        mask = None
        if good:
            if not p.payload:
                p.reference_before = points.point
                self._pending_streams.add(self)
            if run:
                mask = points.receive(range(batch.first_id, batch.first_id + good), p.reference)
            else:
                rows = zip(batch.flags[:good], batch.ids[:good], strict=True)  # type: ignore[index]
                mask = points.receive([None if f & _NO_STABLE_REFERENCE else m for f, m in rows], p.reference)
            if mask is None and good == n:  # the busy path: every record new
                self._buffer(batch)
            else:
                kept = range(good) if mask is None else [row for row in range(good) if mask[row]]
                if kept:
                    self._buffer(batch.select(kept))
        if error is not None:
            batch.accepted = (mask or [True] * good) + [False] * (n - good)
            raise error
        batch.accepted = mask
        return offset

    def _check(self, batch: MessageBatch) -> tuple[int, LogError | None]:
        """How many records lead the batch whose values fit the log, and the error of the one after them.

        Record by record: for a batch other than a run, or a run holding a
        value out of range.
        """
        flags, ids, _ = batch.columns()
        rows = zip(flags, ids, batch.event_times, strict=True)
        for row, (f, message_id, event_time) in enumerate(rows):  # bounded by the batch
            if message_id is None:
                if f & BOUNDARY:
                    return row, LogError("a BOUNDARY record needs a message id (it cannot be EPHEMERAL)")
            elif not 0 <= message_id <= MAX_INT64:
                return row, _out_of_range("message id", message_id)
            if event_time is not None and not 0 <= event_time <= MAX_INT64:
                return row, _out_of_range("event time", event_time)
        return len(flags), None

    def _buffer(self, batch: MessageBatch) -> None:
        """Append the batch's records to the pending columns, and count their epochs.

        Without a BOUNDARY each record is an epoch of its own, or, once the
        stream used boundaries, falls in the open epoch; only a batch with
        boundaries counts them record by record.
        """
        p, k = self.pending, len(batch.payloads)
        if batch.flags is None:
            p.message_id.extend(range(batch.first_id, batch.first_id + k))
            p.key.extend([None] * k)
            p.payload.extend(batch.payloads)  # type: ignore[arg-type]
            p.boundary.extend([False] * k)
            p.stable.extend([True] * k)
            boundaries = None
        else:
            flags = batch.flags
            p.message_id.extend(batch.ids)  # type: ignore[arg-type]
            p.key.extend(batch.keys)  # type: ignore[arg-type]
            p.payload.extend([payload or b"" for payload in batch.payloads])
            boundaries = [bool(f & BOUNDARY) for f in flags]
            p.boundary.extend(boundaries)
            p.stable.extend([not f & _NO_STABLE_REFERENCE for f in flags])
            if not any(boundaries):
                boundaries = None
        p.event_time.extend(batch.event_times)
        if boundaries is None:
            if self.uses_boundaries:  # all in the open epoch
                p.epoch.extend([self.next_epoch] * k)
            else:  # each an epoch of its own
                p.epoch.extend(range(self.next_epoch, self.next_epoch + k))
                self.next_epoch += k
            self.end += k
            if not self.uses_boundaries:
                self.complete = self.end
            return
        for boundary in boundaries:  # bounded by the batch
            p.epoch.append(self.next_epoch)
            self.end += 1
            if boundary:
                self.uses_boundaries = True
            if boundary or not self.uses_boundaries:
                self.next_epoch += 1
                self.complete = self.end

    def seal(self, now_us: int) -> _Sealed | None:
        """Take the pending records and the stream state after them (caller's thread).

        Appends after this go to the next group; the sealed part is only
        read from here on, by the I/O thread.
        """
        p = self.pending
        n = len(p.payload)
        if n == 0:
            return None
        self.pending = _Pending()
        return _Sealed(
            pending=p,
            meta=self.meta,
            first_offset=self.end - n,
            reference_after=self.points.point,
            complete_after=self.complete,
            next_epoch=self.next_epoch,
            uses_boundaries=self.uses_boundaries,
            written_at_us=now_us,
        )

    def write(self, sealed: _Sealed, segment_bytes: int) -> IndexEntry:
        """Write a sealed batch to the segment, not yet synced (I/O thread); return its entry."""
        if self.segment is None or self.segment.size >= segment_bytes:
            if self.segment is not None:
                self.segment.sync()
                self.segment.close()
            self.segment = SegmentWriter(self.directory, sealed.first_offset, None)
        p = sealed.pending
        position, length, checksum = self.segment.append(p.to_batch(sealed.meta))
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

    def write_entry(self, entry: IndexEntry, group: SyncGroup) -> None:
        """Append the index entry, for ``group`` to sync (I/O thread).

        The batch becomes visible only when the caller adds the entry to
        :attr:`entries`, after the sync.
        """
        write_all(self._index_fd, encode_entry(entry))
        group.add_file(self._index_fd)

    def has_closed_segments(self) -> bool:
        """True if some entry lies in a segment no longer appended to (truncation could drop it)."""
        entries = self.entries
        return bool(entries) and entries[0].segment != entries[-1].segment

    def drop_segments_below(self, below_offset: int, keep_after_us: int) -> int:
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
            self._carry_received_ids(drop)
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

    def _carry_received_ids(self, drop: set[int]) -> None:
        """Persist the stable ids of segments about to be dropped that dedup still needs.

        Ids below the first retained record's point of reference are
        implied by it; an unordered stream may also hold ids above it, and
        those must survive the segment. Written before the index changes,
        so a crash in between only leaves ids that are still stored anyway.
        """
        floor = next(e for e in self.entries if e.segment not in drop).reference_before
        carried = RangeSet()
        for a, b in self._carried():
            if b > floor:
                carried.add_range(max(a, floor), b)
        dropped = tuple(e for e in self.entries if e.segment in drop)
        for a, b in _received_ranges(StreamIndex(self.meta, self.directory, dropped)):
            if b > floor:
                carried.add_range(max(a, floor), b)
        write_atomically(self.directory / CARRIED_FILE, json.dumps(list(carried)).encode())

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

    def close(self) -> None:
        """Release the stream's files (it reopens them on its next write)."""
        if self.segment is not None:
            self.segment.close()
            self.segment = None
        if self._index_fd >= 0:
            os.close(self._index_fd)
            self._index_fd = -1


def _received_ranges(view: StreamIndex) -> Iterator[tuple[int, int]]:
    """The stable message ids among a view's records, as ``[a, b)`` ranges.

    Reading them checks every batch's checksum (this is how opening the log
    verifies what it keeps). A corrupt batch's ids cannot be read: it is
    reported once, and the ids between the points of reference before and
    after it count as received, which covers all of them in an ORDERED
    stream; an unordered stream's ids above that point may be taken again.
    """
    corrupt: list[BatchCorrupt] = []
    for batch in view.read(view.earliest, view.end, on_corrupt=corrupt.append):
        for m in batch.column("message_id").filter(batch.column("stable")).to_pylist():
            yield m, m + 1
    for c in corrupt:
        record_corrupt(c)
        logger.error("aqueduct log: %s; the records are lost to readers (see docs/reliability.md)", c)
        yield c.entry.reference_before, c.entry.reference_after


def _recover_stream(directory: Path) -> tuple[StreamMeta, list[IndexEntry]]:
    """Cut a stream directory back to what its index vouches for."""
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


class DurableLog:
    """The writer of a log directory (one process at a time).

    ``segment_bytes`` is the size after which a stream starts a new
    segment (truncation drops whole segments). ``retention_seconds`` keeps
    segments this long after their last write even once they are
    committed downstream, so that a query can be re-run over them.
    ``max_open_streams`` bounds the streams whose files stay open between
    group commits (the least recently written are closed, and reopen on
    their next write), so thousands of streams do not cost thousands of
    descriptors.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        retention_seconds: float = 0.0,
        max_open_streams: int = DEFAULT_MAX_OPEN_STREAMS,
    ) -> None:
        if max_open_streams < 1:
            raise LogError(f"max_open_streams must be at least 1, got {max_open_streams}")
        self.path = Path(path)
        self.max_open_streams = max_open_streams
        self.segment_bytes = segment_bytes
        self.retention_seconds = retention_seconds
        self.path.mkdir(parents=True, exist_ok=True)
        fmt = self.path / FORMAT_FILE
        if not fmt.exists():
            write_atomically(fmt, FORMAT_TEXT.encode())
        check_log_dir(self.path)
        self._lock_fd = os.open(self.path / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise LogLocked(f"log {str(self.path)!r} is already open for writing") from None
        (self.path / STREAMS_DIR).mkdir(exist_ok=True)
        #: Streams changed, for readers that plan (I/O thread; a fresh one per writer, see changes.py).
        self._changes = ChangeJournal(self.path / CHANGES_FILE)
        #: Every file write after opening runs here, one job at a time, in submission order.
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aqueduct-log-io")
        #: Streams whose files the next creation job makes: (writer, its answer, point of reference).
        self._creations: list[tuple[_StreamWriter, Future[int], int]] = []
        self._creations_lock = threading.Lock()
        self._streams: dict[int, _StreamWriter] = {}
        #: streams with records appended since the last group commit began (appending thread)
        self._pending: set[_StreamWriter] = set()
        #: Streams whose files are open, least recently written first (I/O thread only).
        self._opened: OrderedDict[int, _StreamWriter] = OrderedDict()
        #: connector -> its stream ids: a HELLO's OK must not scan every stream of the log
        self._by_connector: dict[str, set[int]] = {}
        #: batches of a group commit that found the disk full, written first by the next (I/O thread)
        self._held: list[tuple[_StreamWriter, _Sealed]] = []
        #: why the log stopped writing (a failed sync), or None (I/O thread)
        self._failed: str | None = None
        for d in sorted((self.path / STREAMS_DIR).iterdir()):
            if d.is_dir() and d.name.isdigit() and (d / META_FILE).exists():
                try:
                    meta, entries = _recover_stream(d)
                except IndexCorrupt as e:  # cutting it would drop acknowledged batches: stop here
                    self._io.shutdown()
                    self._changes.close()
                    os.close(self._lock_fd)
                    raise LogError(f"log {str(self.path)!r} stream {d.name}: {e}; nothing was cut") from None
                writer = self._streams[meta.stream_id] = _StreamWriter(d, meta, entries, self._pending)
                writer.check_files()
                self._by_connector.setdefault(meta.connector, set()).add(meta.stream_id)

    # -- streams -----------------------------------------------------------

    def open_stream(
        self,
        stream_id: int,
        stream_name: str,
        connector: str,
        *,
        mode: Mode = Mode.ORDERED,
        point_of_reference: int = 0,
        boundaries: bool = False,
    ) -> Future[int]:
        """Create or re-open a stream (on NOTIFY); resolves to its current point of reference.

        The stream is usable at once: appends may follow before the future
        is done. Its files (directory, metadata, empty index) are created on
        the I/O thread, in order before any group commit holding its records,
        so the event loop never waits for their fsyncs. A stream owned by
        another connector raises :class:`LogError` here, before anything
        changes.

        ``mode`` is the stream's delivery mode (:class:`StreamMeta`): ORDERED
        streams have strictly increasing ids (point of reference = last
        stable id + 1); the others have consecutive ids from
        ``point_of_reference`` (point of reference = first id not yet
        received). Stream ids are unique within a log: a stream owned
        by another connector is refused.

        Epochs: a stream that sends BOUNDARY markers has an epoch per
        boundary, one that never does has an epoch per message. The wire
        protocol does not announce which, so a stream counts as using
        boundaries from its first BOUNDARY on (remembered in the log);
        records before it were single-message epochs. ``boundaries=True``
        declares it up front, so that even the first epoch stays whole.
        """
        if not 0 <= stream_id <= MAX_UINT64:
            raise LogError(f"stream id {stream_id} is outside 0..2**64-1")
        s = self._streams.get(stream_id)
        meta = StreamMeta(stream_id, stream_name, connector, mode)
        files: Callable[[], None] | None = None
        create = False
        if s is None:
            s = self._streams[stream_id] = _StreamWriter(
                self.path / STREAMS_DIR / str(stream_id), meta, [], self._pending
            )
            s.created = False
            create = True
            self._by_connector.setdefault(connector, set()).add(stream_id)
        elif s.meta.connector != connector:
            raise LogError(
                f"stream {stream_id} belongs to connector {s.meta.connector!r}, not {connector!r}"
            )
        elif not s.created:  # being created, or an earlier creation failed: (try) again
            s.meta = meta
            create = True
        elif s.meta != meta:
            s.meta = meta
            files = partial(self._changed, partial(write_atomically, s.directory / META_FILE, meta.to_json()), stream_id)
        s.points.set_mode(mode)
        reference = s.points.start_from(point_of_reference)
        s.uses_boundaries = s.uses_boundaries or boundaries
        if create:
            return self._queue_creation(s, reference)
        return self._write(files, reference)

    def _queue_creation(self, s: _StreamWriter, reference: int) -> Future[int]:
        """Have the I/O thread create the stream's files with the others queued meanwhile.

        A fleet's NOTIFYs arrive by the thousand: created one by one, each
        stream costs its own fsyncs (about 1 ms); created together, a batch
        costs two syncs (see :class:`SyncGroup`). The batch job is queued
        when the first stream joins an empty queue, so it runs before any
        group commit submitted after that stream's records.
        """
        done: Future[int] = Future()
        with self._creations_lock:
            self._creations.append((s, done, reference))
            first = len(self._creations) == 1
        if first:
            self._io.submit(self._create_queued)
        return done

    def _create_queued(self) -> None:
        """Create every queued stream's files with two syncs in all (I/O thread)."""
        with self._creations_lock:
            queued, self._creations = self._creations, []
        waiting: dict[_StreamWriter, list[tuple[Future[int], int]]] = {}
        for s, done, reference in queued:
            waiting.setdefault(s, []).append((done, reference))
        group = SyncGroup()
        written: list[_StreamWriter] = []
        for s, answers in waiting.items():
            try:
                s.write_new_files(group)
            except OSError as exc:  # out of descriptors, a full disk: this stream retries later
                for done, _ in answers:
                    done.set_exception(exc)
            else:
                written.append(s)
        try:
            group.sync()
            for s in written:
                s.name_new_files(group)
            group.add_dir(self.path / STREAMS_DIR)
            group.sync()
        except OSError as exc:
            for s in written:
                for done, _ in waiting[s]:
                    done.set_exception(exc)
            return
        for s in written:
            s.created = True
        self._changes.record(s.meta.stream_id for s in written)
        for s in written:
            for done, reference in waiting[s]:
                done.set_result(reference)

    def _write(self, job: Callable[[], object] | None, result: T) -> Future[T]:
        """Run ``job`` on the I/O thread, behind every write already queued; resolve to ``result``.

        Queued behind nothing, the answer is ready at once: a stream that
        needs no file change should not wait for a group commit in flight.
        """
        if job is None:
            done: Future[T] = Future()
            done.set_result(result)
            return done

        def run() -> T:
            job()
            return result

        return self._io.submit(run)

    def _stream(self, stream_id: int) -> _StreamWriter:
        try:
            return self._streams[stream_id]
        except KeyError:
            raise LogError(f"stream {stream_id} was never opened in this log") from None

    def stream_ids(self) -> list[int]:
        """Every stream the log holds, sorted."""
        return sorted(self._streams)

    def stream_names(self) -> dict[int, str]:
        """Every stream the log holds, id -> name, sorted by id."""
        return {sid: self._streams[sid].meta.stream_name for sid in sorted(self._streams)}

    def connector_of(self, stream_id: int) -> str:
        """The connector (program/instance) that owns the stream."""
        return self._stream(stream_id).meta.connector

    def references_of(self, connector: str) -> list[tuple[int, str, int]]:
        """``(stream id, name, durable point of reference)`` of a connector's streams (for OK)."""
        return [
            (sid, self._streams[sid].meta.stream_name, self.durable_reference(sid))
            for sid in sorted(self._by_connector.get(connector, ()))
        ]

    # -- appending ---------------------------------------------------------

    def is_duplicate(self, stream_id: int, message_id: int) -> bool:
        """True if a stable message with this id must be dropped (already held)."""
        return self._stream(stream_id).is_duplicate(message_id)

    def append(self, messages: MessageBatch | ConnectorMessage) -> int:
        """Buffer one stream's records; return the first one's offset. Durable only after :meth:`commit`.

        ``messages`` is the worker session's batch
        (:class:`~aqueduct.connector.batch.MessageBatch`), appended in one
        step per batch (a run of new ids by extending each column at once);
        a single :class:`~aqueduct.connector.frames.ConnectorMessage` is the batch of
        one. An
        EPHEMERAL or UNSTABLE_REFERENCE record never moves the point of
        reference; ``event_time`` is in microseconds since the Unix epoch.

        A stable id already received is dropped: the batch's
        :attr:`~aqueduct.connector.batch.MessageBatch.accepted` says which
        (None: none was), and a lone message raises
        :class:`DuplicateMessage` instead (use :meth:`is_duplicate` to drop
        quietly). A record that breaks a rule raises :class:`LogError`; the
        records before it stay buffered.
        """
        batch = messages if type(messages) is MessageBatch else MessageBatch.of((messages,))  # type: ignore[arg-type]
        writer = self._stream(batch.stream_id)
        offset = writer.append(batch)
        if batch is not messages and batch.accepted is not None:
            raise DuplicateMessage(
                f"stream {batch.stream_id}: message id {messages.message_id} was already "  # type: ignore[union-attr]
                f"received (point of reference {writer.points.point})"
            )
        return offset

    def start_commit(self, now: float | None = None) -> Future[dict[int, int]]:
        """Group commit in the background: make every buffered record durable and visible.

        Seals the buffers now (later appends go to the next group) and
        writes them on the log's I/O thread. The future's result is the new
        durable end offset of each stream that had records; once it is
        done the records are fsynced, indexed and visible. ``now``
        (seconds) stamps the batches for retention.
        """
        now_us = int((time.time() if now is None else now) * 1_000_000)
        pending = sorted(self._pending, key=lambda s: s.meta.stream_id)
        self._pending.clear()
        sealed = [(s, part) for s in pending if (part := s.seal(now_us)) is not None]
        if not sealed and not self._held:
            nothing: Future[dict[int, int]] = Future()
            nothing.set_result({})
            return nothing
        return self._io.submit(self._write_group, sealed)

    def _write_group(self, sealed: list[tuple[_StreamWriter, _Sealed]]) -> dict[int, int]:
        """Write, fsync, then index and fsync each sealed batch (I/O thread).

        Streams are written ``max_open_streams`` at a time, so a group
        commit touching 10,000 streams never holds 10,000 segments and
        indexes open at once (the process's descriptor limit).

        Batches held from a commit that found the disk full go first (a
        stream's batches stay in order). Out of space again, the rest is
        held for the next commit and :class:`LogFull` raised; any other
        failure makes the log :class:`LogFailed` for good.
        """
        if self._failed is not None:
            raise LogFailed(self._failed)
        sealed, self._held = self._held + sealed, []
        ends: dict[int, int] = {}
        step = self.max_open_streams
        for i in range(0, len(sealed), step):
            part = sealed[i : i + step]
            try:
                ends |= self._write_some(part)
            except OSError as exc:
                self._held = sealed[i:]
                self._give_up_on(part, exc)
        return ends

    def _give_up_on(self, part: list[tuple[_StreamWriter, _Sealed]], exc: OSError) -> None:
        """Cut off what the failed step wrote and raise what it means (I/O thread)."""
        what = f"log {str(self.path)!r}: group commit failed: {exc.strerror or exc}"
        if exc.errno in NO_ROOM:
            try:
                for s in dict.fromkeys(s for s, _ in part):
                    self._opened.pop(s.meta.stream_id, None)
                    s.roll_back()
            except OSError as cut:
                self._failed = f"{what}; then cutting it off failed: {cut.strerror or cut}"
                raise LogFailed(self._failed) from None
            raise LogFull(f"{what}; {sum(len(p.pending.payload) for _, p in self._held)} records held, not durable yet") from None
        self._failed = f"{what} (errno {exc.errno}): what was written since the last good sync may not be durable"
        raise LogFailed(self._failed) from None

    def _write_some(self, sealed: list[tuple[_StreamWriter, _Sealed]]) -> dict[int, int]:
        opened = self._opened
        for s, _ in sealed:
            s.open_files()
            opened[s.meta.stream_id] = s
            opened.move_to_end(s.meta.stream_id)
        written = [(s, s.write(part, self.segment_bytes)) for s, part in sealed]
        data = SyncGroup()
        for s, _ in written:
            assert s.segment is not None
            s.segment.add_to(data)
        data.sync()  # the batches, before any index entry that points at them
        index = SyncGroup()
        for s, entry in written:
            assert s.segment is not None
            s.segment.created = False
            s.write_entry(entry, index)
        index.sync()
        for s, entry in written:
            s.entries.append(entry)  # visible from here on
        self._changes.record(s.meta.stream_id for s, _ in written)
        while len(opened) > self.max_open_streams:  # least recently written first
            _, idle = opened.popitem(last=False)
            idle.close()
        return {s.meta.stream_id: entry.end_offset for s, entry in written}

    def commit(self, now: float | None = None) -> dict[int, int]:
        """Group commit, waiting for it: :meth:`start_commit` and its result."""
        return self.start_commit(now).result()

    # -- positions ---------------------------------------------------------

    def snapshot(self, stream_id: int) -> StreamIndex:
        """Read-only view of a stream's committed records."""
        return self._stream(stream_id).snapshot()

    def durable_end(self, stream_id: int) -> int:
        """Exclusive end offset of the committed records."""
        return self._stream(stream_id).view().end

    def durable_reference(self, stream_id: int) -> int:
        """Point of reference of everything committed (what OK reports on resume)."""
        return self._stream(stream_id).view().reference

    def complete_offset(self, stream_id: int) -> int:
        """End of the last closed epoch among the committed records."""
        return self._stream(stream_id).view().complete

    def reference_at(self, stream_id: int, offset: int) -> int:
        """Point of reference covering every record of the stream below ``offset``."""
        view = self._stream(stream_id).view()
        if offset == view.end:  # e.g. Spark caught up: the index knows it, no segment read
            return view.reference
        return view.reference_at(offset)

    # -- trimming ----------------------------------------------------------

    def truncate(self, stream_id: int, below_offset: int, now: float | None = None) -> Future[int]:
        """Drop whole segments holding only records below ``below_offset``.

        Call it with offsets the downstream has committed (bounded input
        reliance). Segments written less than ``retention_seconds`` ago,
        and the segment being appended to, are kept. The file work runs on
        the I/O thread; the future resolves to the new earliest stored
        offset. An offset beyond the committed records raises
        :class:`LogError` at once.
        """
        s = self._stream(stream_id)
        end = s.view().end
        if below_offset > end:
            raise LogError(
                f"cannot truncate stream {stream_id} below {below_offset}: "
                f"only {end} records are committed"
            )
        if not s.has_closed_segments():
            return self._write(None, s.view().earliest)  # nothing droppable: no file work
        now_s = time.time() if now is None else now
        keep_after_us = int((now_s - self.retention_seconds) * 1_000_000)
        # On the I/O thread, after any commit in flight: its index entry must
        # be in the list the truncation rewrites the index from.
        return self._io.submit(self._changed, partial(s.drop_segments_below, below_offset, keep_after_us), stream_id)

    def _changed(self, job: Callable[[], T], stream_id: int) -> T:
        """Run a file change of one stream, then journal it for readers (I/O thread)."""
        result = job()
        self._changes.record((stream_id,))
        return result

    def write_acked(self, positions: Mapping[int, int]) -> Future[None]:
        """Message, for ``aqueduct-bridge status``, the offsets whose points were acked (I/O thread)."""
        return self._write(partial(write_acked, self.path, dict(positions)), None)

    def close(self) -> None:
        """Release files and the writer lock once a commit in flight is done (buffered records are discarded)."""
        self._io.submit(self._close_streams).result()
        self._io.shutdown()
        os.close(self._lock_fd)

    def _close_streams(self) -> None:
        self._changes.close()
        for s in self._streams.values():
            s.close()
        self._streams.clear()
        self._pending.clear()
        self._opened.clear()

    def __enter__(self) -> DurableLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["DurableLog", "DuplicateMessage", "LogError", "LogFailed", "LogFull", "LogLocked"]
