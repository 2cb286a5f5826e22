"""The bridge's durable log: one append-only partition per connector stream.

Layout of a log directory::

    FORMAT                      "aqueduct-log 1"
    LOCK                        flock'ed by the one writer process, which writes its pid there
    streams/<stream id>/
        meta.json               stream name, owning connector, id ordering
        received.json           dedup ids that only truncated segments held
        index                   CRC'd entries: the only source of truth
        <base offset>.arrow     Arrow IPC segments
    commits/<consumer>.json     offsets the Spark source committed

:class:`DurableLog` is the public face; each of its jobs is a module of
its own:

- appends accumulate in memory, column by column, per stream
  (:mod:`~aqueduct.bridge.storage.stream_writer`, the records path: rules,
  deduplication, epochs; :mod:`~aqueduct.bridge.storage.pending`);
- a group commit (:meth:`DurableLog.start_commit`, or the blocking
  :meth:`DurableLog.commit`) makes them durable and visible
  (:mod:`~aqueduct.bridge.storage.group_commit`), through each stream's
  files (:mod:`~aqueduct.bridge.storage.stream_files`), of which only the
  recently written stay open (:mod:`~aqueduct.bridge.storage.open_files`);
- new streams' files are created in batches
  (:mod:`~aqueduct.bridge.storage.stream_creation`);
- deduplication survives restarts and truncation
  (:mod:`~aqueduct.bridge.storage.received`).

Only once a group commit's index entries are synced are its records
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
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

from aqueduct.bridge.storage.acked import write_acked
from aqueduct.bridge.storage.changes import CHANGES_FILE, ChangeJournal
from aqueduct.bridge.storage.errors import (
    DuplicateMessage,
    LogError,
    LogFailed,
    LogFull,
    LogLocked,
    RecordRefused,
)
from aqueduct.bridge.storage.group_commit import GroupCommit
from aqueduct.bridge.storage.index import IndexCorrupt, write_atomically
from aqueduct.bridge.storage.open_files import DEFAULT_MAX_OPEN_STREAMS, OpenFiles
from aqueduct.bridge.storage.schema import MAX_UINT64
from aqueduct.bridge.storage.stream_creation import StreamCreation
from aqueduct.bridge.storage.stream_files import recover_stream
from aqueduct.bridge.storage.stream_writer import Appended, StreamWriter
from aqueduct.bridge.storage.view import (
    FORMAT_FILE,
    FORMAT_TEXT,
    META_FILE,
    STREAMS_DIR,
    StreamIndex,
    StreamMeta,
    check_log_dir,
)
from aqueduct.bridge.storage.writer_lock import take_writer_lock
from aqueduct.records.columns import RecordColumns, RecordFields
from aqueduct.wire.modes import Mode

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024

T = TypeVar("T")


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
        self.retention_seconds = retention_seconds
        self.path.mkdir(parents=True, exist_ok=True)
        fmt = self.path / FORMAT_FILE
        if not fmt.exists():
            write_atomically(fmt, FORMAT_TEXT.encode())
        check_log_dir(self.path)
        self._lock_fd = take_writer_lock(self.path)  # LogLocked names the process holding it
        (self.path / STREAMS_DIR).mkdir(exist_ok=True)
        #: Streams changed, for readers that plan (I/O thread; a fresh one per writer, see changes.py).
        self._changes = ChangeJournal(self.path / CHANGES_FILE)
        #: Every file write after opening runs here, one job at a time, in submission order.
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aqueduct-log-io")
        self._creation = StreamCreation(self.path / STREAMS_DIR, self._io, self._changes)
        #: Streams whose files are open, least recently written first (I/O thread only).
        self._open_files = OpenFiles(max_open_streams)
        self._commits = GroupCommit(str(self.path), self._io, self._changes, self._open_files, segment_bytes)
        self._streams: dict[int, StreamWriter] = {}
        #: connector -> its stream ids: a HELLO's OK must not scan every stream of the log
        self._by_connector: dict[str, set[int]] = {}
        for d in sorted((self.path / STREAMS_DIR).iterdir()):
            if d.is_dir() and d.name.isdigit() and (d / META_FILE).exists():
                try:
                    meta, entries = recover_stream(d)
                except IndexCorrupt as e:  # cutting it would drop acknowledged batches: stop here
                    self._io.shutdown()
                    self._changes.close()
                    os.close(self._lock_fd)
                    raise LogError(f"log {str(self.path)!r} stream {d.name}: {e}; nothing was cut") from None
                writer = self._streams[meta.stream_id] = StreamWriter(d, meta, entries, self._commits.pending)
                writer.files.check_files()
                self._by_connector.setdefault(meta.connector, set()).add(meta.stream_id)

    @property
    def segment_bytes(self) -> int:
        """The size after which a stream starts a new segment."""
        return self._commits.segment_bytes

    @property
    def max_open_streams(self) -> int:
        """Streams whose files stay open between group commits."""
        return self._open_files.limit

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
        owner: str = "",
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

        Owner: ``owner`` is the subject of the session's producer identity
        (``""`` for ``anonymous``, the shared cookie's sessions, which are
        never checked). The first identity to write a stream owns it
        (remembered in its metadata, so across restarts): another subject
        is refused with :class:`LogError`, even where its permissions allow
        the stream's name, so a wide grant (``allow CN=* streams=*``) lets
        hosts create streams but not write each other's. A stream only
        anonymous sessions wrote is taken by the first identity that does.
        """
        if not 0 <= stream_id <= MAX_UINT64:
            raise LogError(f"stream id {stream_id} is outside 0..2**64-1")
        s = self._streams.get(stream_id)
        if s is not None and owner and s.meta.owner not in ("", owner):
            raise LogError(f"stream {stream_id} belongs to identity {s.meta.owner!r}, not {owner!r}")
        meta = StreamMeta(stream_id, stream_name, connector, mode, owner or (s.meta.owner if s is not None else ""))
        files: Callable[[], None] | None = None
        create = False
        if s is None:
            s = self._streams[stream_id] = StreamWriter(
                self.path / STREAMS_DIR / str(stream_id), meta, [], self._commits.pending
            )
            s.files.created = False
            create = True
            self._by_connector.setdefault(connector, set()).add(stream_id)
        elif s.meta.connector != connector:
            raise LogError(
                f"stream {stream_id} belongs to connector {s.meta.connector!r}, not {connector!r}"
            )
        elif not s.files.created:  # being created, or an earlier creation failed: (try) again
            s.meta = meta
            create = True
        elif s.meta != meta:
            s.meta = meta
            files = partial(self._changed, partial(write_atomically, s.files.directory / META_FILE, meta.to_json()), stream_id)
        s.points.set_mode(mode)
        reference = s.points.start_from(point_of_reference)
        s.uses_boundaries = s.uses_boundaries or boundaries
        if create:
            return self._creation.queue(s, reference)
        return self._write(files, reference)

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

    def _stream(self, stream_id: int) -> StreamWriter:
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

    def owner_of(self, stream_id: int) -> str:
        """The subject of the producer identity that owns the stream (``""``: only anonymous sessions wrote it)."""
        return self._stream(stream_id).meta.owner

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

    def append(self, records: RecordColumns | RecordFields) -> Appended:
        """Buffer one stream's records; say what was done with them. Durable only after :meth:`commit`.

        ``records`` is the worker session's batch (a
        :class:`~aqueduct.records.columns.RecordColumns`: the connector's
        :class:`~aqueduct.connector.batch.MessageBatch`), appended in one
        step per batch (a run of new ids by extending each column at once);
        a single record (:class:`~aqueduct.records.columns.RecordFields`, a
        connector ``Message`` say) is the batch of one. An
        EPHEMERAL or UNSTABLE_REFERENCE record never moves the point of
        reference; ``event_time`` is in microseconds since the Unix epoch.

        A stable id already received is dropped: the result
        (:class:`~aqueduct.bridge.storage.stream_writer.Appended`) says
        which (``accepted``), how many data records were stored and how many
        dropped, and a lone record raises :class:`DuplicateMessage` instead
        (use :meth:`is_duplicate` to drop quietly). A record that breaks a
        rule raises :class:`RecordRefused`, whose ``appended`` says what was
        done with the records before it, which stay buffered.
        """
        batch = records if isinstance(records, RecordColumns) else RecordColumns.general((records,))
        writer = self._stream(batch.stream_id)
        appended = writer.append(batch)
        if batch is not records and appended.duplicates:
            raise DuplicateMessage(
                f"stream {batch.stream_id}: message id {records.message_id} was already "  # type: ignore[union-attr]
                f"received (point of reference {writer.points.point})"
            )
        return appended

    def start_commit(self, now: float | None = None) -> Future[dict[int, int]]:
        """Group commit in the background: make every buffered record durable and visible.

        Seals the buffers now (later appends go to the next group) and
        writes them on the log's I/O thread. The future's result is the new
        durable end offset of each stream that had records; once it is
        done the records are fsynced, indexed and visible. ``now``
        (seconds) stamps the batches for retention.
        """
        now_us = int((time.time() if now is None else now) * 1_000_000)
        return self._commits.start(now_us)

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
        if not s.files.has_closed_segments():
            return self._write(None, s.view().earliest)  # nothing droppable: no file work
        now_s = time.time() if now is None else now
        keep_after_us = int((now_s - self.retention_seconds) * 1_000_000)
        # On the I/O thread, after any commit in flight: its index entry must
        # be in the list the truncation rewrites the index from.
        job = partial(s.files.drop_segments_below, s.meta, below_offset, keep_after_us)
        return self._io.submit(self._changed, job, stream_id)

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
            s.files.close()
        self._streams.clear()
        self._commits.pending.clear()
        self._open_files.clear()

    def __enter__(self) -> DurableLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "DEFAULT_MAX_OPEN_STREAMS",
    "DEFAULT_SEGMENT_BYTES",
    "Appended",
    "DurableLog",
    "DuplicateMessage",
    "LogError",
    "LogFailed",
    "LogFull",
    "LogLocked",
    "RecordRefused",
]
