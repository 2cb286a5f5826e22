"""The records path into one stream: the log's rules, deduplication, epochs, and the pending columns.

:meth:`DurableLog.append <aqueduct.bridge.storage.log.DurableLog.append>`
hands each batch to its stream's :class:`StreamWriter`, on the bridge's
event loop: its values are checked, its ids go through the stream's
points of reference (the rulebook the worker sessions share,
:class:`~aqueduct.records.points.StreamPoints`), and the records it keeps
grow the pending columns, one step per batch. What it did comes back as
:class:`Appended`. A group commit then seals the pending columns
(:meth:`StreamWriter.seal`) for the I/O thread, which writes them through
the stream's files (:class:`~aqueduct.bridge.storage.stream_files.StreamFiles`);
this side never touches a file.

Each stream tracks, per record: its offset (record count), its epoch, and
the stream's point of reference after it; per stream: the received-id
range set used for deduplication, rebuilt on open from the retained
records, and the end of the last complete epoch.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from aqueduct.bridge.storage.errors import RecordRefused
from aqueduct.bridge.storage.index import IndexEntry
from aqueduct.bridge.storage.pending import Pending, Sealed
from aqueduct.bridge.storage.received import rebuilt_received
from aqueduct.bridge.storage.schema import MAX_INT64
from aqueduct.bridge.storage.stream_files import StreamFiles
from aqueduct.bridge.storage.view import StreamIndex, StreamMeta
from aqueduct.records.columns import RecordColumns
from aqueduct.records.flags import BOUNDARY, NO_STABLE_REFERENCE
from aqueduct.records.points import StreamPoints


class Appended(NamedTuple):
    """What :meth:`DurableLog.append <aqueduct.bridge.storage.log.DurableLog.append>` did with a batch.

    Immutable, and a named tuple rather than a frozen dataclass: one is made
    per batch on the record path, and a frozen dataclass costs several times
    as much to build (each field set through ``object.__setattr__``).
    """

    offset: int
    """The offset of the batch's first record (the first stored one's: a dropped record takes none)."""
    accepted: tuple[bool, ...] | None
    """Per record, True if stored (None: every one was)."""
    stored: int
    """Data records stored (a BOUNDARY is not data)."""
    duplicates: int
    """Records dropped as already held (not those a :class:`RecordRefused` refused)."""


#: The busy path's one object per batch, built by the tuple's own constructor
#: (``_make``), without the named tuple's ``__new__`` in Python: a third cheaper.
_make_appended = Appended._make


class StreamWriter:
    """Appending-side state of one stream partition (the bridge's event loop), with its files beside."""

    def __init__(
        self, directory: Path, meta: StreamMeta, entries: list[IndexEntry], pending_streams: set[StreamWriter]
    ) -> None:
        #: the stream's files, written on the I/O thread only
        self.files = StreamFiles(directory, entries)
        #: the log's streams with records pending: a group commit visits only those
        self._pending_streams = pending_streams
        self.meta = meta
        last = entries[-1] if entries else None
        self.end = last.end_offset if last else 0
        self.complete = last.complete_after if last else 0
        self.next_epoch = last.next_epoch if last else 0
        self.uses_boundaries = last.uses_boundaries if last else False
        #: Dedup and point of reference (the rulebook shared with the sessions), as of
        #: every appended record, committed or pending.
        self.points = StreamPoints(
            meta.mode, rebuilt_received(meta, directory, entries), last.reference_after if last else 0
        )
        self.pending = Pending()

    def snapshot(self) -> StreamIndex:
        """A read-only view of the committed records (a copy: later commits do not show)."""
        return StreamIndex(self.meta, self.files.directory, tuple(self.files.entries))

    def view(self) -> StreamIndex:
        """A view sharing the live entry list: O(1), for answering one question now."""
        return StreamIndex(self.meta, self.files.directory, self.files.entries)

    def is_duplicate(self, message_id: int) -> bool:
        return self.points.holds(message_id)

    def append(self, batch: RecordColumns) -> Appended:
        """Buffer a batch of this stream's records (see :meth:`DurableLog.append`); say what was done.

        One step per batch: the records' values are checked (a run's by its
        first and last id, anything else record by record: :meth:`_check`),
        their ids go through the rulebook in one call,
        which takes a run of new ids at once, and the pending columns grow
        by extension, from the run's own columns when every record is new.
        A record that breaks a rule raises :class:`RecordRefused`; the
        records before it stay buffered, it and those after it are not accepted.
        """
        offset, points, p = self.end, self.points, self.pending
        n, run = len(batch.payloads), batch.flags is None
        good, error = n, None
        if run:  # a run's ids are consecutive, so its first and last tell
            times = batch.event_times
            if batch.first_id < 0 or batch.first_id + n - 1 > MAX_INT64 or (
                times.count(None) != n and not _times_fit(times)  # most runs carry no time: no pass in Python
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
                mask = points.receive([None if f & NO_STABLE_REFERENCE else m for f, m in rows], p.reference)
            if mask is None and good == n:  # the busy path: every record new
                self._buffer(batch)
            else:
                kept = range(good) if mask is None else [row for row in range(good) if mask[row]]
                if kept:
                    self._buffer(batch.select(kept))
        if error is not None:
            accepted = (mask or [True] * good) + [False] * (n - good)
            raise RecordRefused(error, _appended(offset, batch, accepted, refused=n - good))
        if mask is None and run:  # the busy path: every record of a run stored, no pass over it
            return _make_appended((offset, None, n, 0))
        return _appended(offset, batch, mask)

    def _check(self, batch: RecordColumns) -> tuple[int, str | None]:
        """How many records lead the batch whose values fit the log, and the rule the one after them breaks.

        Record by record: for a batch other than a run, or a run holding a
        value out of range.
        """
        flags, ids, _ = batch.columns()
        rows = zip(flags, ids, batch.event_times, strict=True)
        for row, (f, message_id, event_time) in enumerate(rows):  # bounded by the batch
            if message_id is None:
                if f & BOUNDARY:
                    return row, "a BOUNDARY record needs a message id (it cannot be EPHEMERAL)"
            elif not 0 <= message_id <= MAX_INT64:
                return row, _out_of_range("message id", message_id)
            if event_time is not None and not 0 <= event_time <= MAX_INT64:
                return row, _out_of_range("event time", event_time)
        return len(flags), None

    def _buffer(self, batch: RecordColumns) -> None:
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
            p.stable.extend([not f & NO_STABLE_REFERENCE for f in flags])
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

    def seal(self, now_us: int) -> Sealed | None:
        """Take the pending records and the stream state after them (caller's thread).

        Appends after this go to the next group; the sealed part is only
        read from here on, by the I/O thread.
        """
        p = self.pending
        n = len(p.payload)
        if n == 0:
            return None
        self.pending = Pending()
        return Sealed(
            pending=p,
            meta=self.meta,
            first_offset=self.end - n,
            reference_after=self.points.point,
            complete_after=self.complete,
            next_epoch=self.next_epoch,
            uses_boundaries=self.uses_boundaries,
            written_at_us=now_us,
        )


def _times_fit(times: list[int | None]) -> bool:
    """Every event time of a run, where set, fits Spark's long."""
    present = [t for t in times if t is not None]
    return min(present) >= 0 and max(present) <= MAX_INT64


def _out_of_range(what: str, value: int) -> str:
    return f"{what} {value} is outside 0..2**63-1 (Spark long)"


def _appended(offset: int, batch: RecordColumns, accepted: list[bool] | None, refused: int = 0) -> Appended:
    """The result of an append other than a run of new records: a BOUNDARY is not data.

    ``refused``: the last records, not accepted because one broke a rule (not duplicates).
    """
    flags = batch.flags
    if accepted is None:
        stored = len(batch.payloads) if flags is None else sum(1 for f in flags if not f & BOUNDARY)
        return Appended(offset, None, stored, 0)
    if flags is None:
        kept = sum(accepted)
    else:
        kept = sum(1 for ok, f in zip(accepted, flags, strict=True) if ok and not f & BOUNDARY)
    return Appended(offset, tuple(accepted), kept, accepted.count(False) - refused)
