"""The group commit pipeline: seal every stream's pending records, then write, sync, index, sync.

One commit makes everything appended since the last one durable and
visible, however many streams it touches: on the caller's thread each
stream's pending records are sealed (later appends go to the next group);
on the log's I/O thread each becomes one Arrow record batch (built for all
the streams at once) written to its stream's segment, every touched
segment is made durable, then one index entry per stream is appended and
the indexes are made durable (two syncs per commit however many streams
it touches: one ``syncfs`` each beyond a few files, see
:mod:`aqueduct.bridge.storage.durability`). Only then are the records
visible. A crash at any point leaves a log whose indexes describe exactly
the batches that were fully written.

A full disk holds the group (written first by the next commit, see
:class:`~aqueduct.bridge.storage.errors.LogFull`); any other failed write
stops the log for good (:class:`~aqueduct.bridge.storage.errors.LogFailed`).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import NoReturn

from aqueduct.bridge.storage.changes import ChangeJournal
from aqueduct.bridge.storage.durability import SyncGroup
from aqueduct.bridge.storage.errors import NO_ROOM, LogFailed, LogFull
from aqueduct.bridge.storage.index import IndexEntry
from aqueduct.bridge.storage.open_files import OpenFiles
from aqueduct.bridge.storage.pending import Sealed, record_batches
from aqueduct.bridge.storage.stream_files import StreamFiles
from aqueduct.bridge.storage.stream_writer import StreamWriter


class GroupCommit:
    """The log's group commits, one after another on its I/O thread (``io``), and what they left held or failed."""

    def __init__(self, where: str, io: ThreadPoolExecutor, changes: ChangeJournal, open_files: OpenFiles, segment_bytes: int) -> None:
        self._where = where  # the log, for error messages
        self._io = io
        self._changes = changes
        self.open_files = open_files
        self.segment_bytes = segment_bytes
        #: streams with records appended since the last group commit began (appending thread)
        self.pending: set[StreamWriter] = set()
        #: batches of a group commit that found the disk full, written first by the next (I/O thread)
        self._held: list[tuple[StreamWriter, Sealed]] = []
        #: why the log stopped writing (a failed sync), or None (I/O thread)
        self._failed: str | None = None

    def start(self, now_us: int) -> Future[dict[int, int]]:
        """Seal every pending stream now and queue the group's writing; resolves to each stream's new durable end."""
        pending = sorted(self.pending, key=lambda s: s.meta.stream_id)
        self.pending.clear()
        sealed = [(s, part) for s in pending if (part := s.seal(now_us)) is not None]
        if not sealed and not self._held:
            nothing: Future[dict[int, int]] = Future()
            nothing.set_result({})
            return nothing
        return self._io.submit(self._write_group, sealed)

    def _write_group(self, sealed: list[tuple[StreamWriter, Sealed]]) -> dict[int, int]:
        """Write, fsync, then index and fsync each sealed batch (I/O thread).

        Batches held from a commit that found the disk full go first (a
        stream's batches stay in order). Out of space again, the whole
        group is held for the next commit and :class:`LogFull` raised; any
        other failure makes the log :class:`LogFailed` for good.
        """
        if self._failed is not None:
            raise LogFailed(self._failed)
        sealed, self._held = self._held + sealed, []
        try:
            return self._write(sealed)
        except OSError as exc:
            self._held = sealed
            self._give_up_on(sealed, exc)

    def _give_up_on(self, sealed: list[tuple[StreamWriter, Sealed]], exc: OSError) -> NoReturn:
        """Cut off what the failed commit wrote and raise what it means (I/O thread)."""
        what = f"log {self._where!r}: group commit failed: {exc.strerror or exc}"
        if exc.errno in NO_ROOM:
            try:
                for s in dict.fromkeys(s for s, _ in sealed):
                    self.open_files.forget(s.meta.stream_id)
                    s.files.roll_back()
            except OSError as cut:
                self._failed = f"{what}; then cutting it off failed: {cut.strerror or cut}"
                raise LogFailed(self._failed) from None
            raise LogFull(f"{what}; {sum(len(p.pending.payload) for _, p in self._held)} records held, not durable yet") from None
        self._failed = f"{what} (errno {exc.errno}): what was written since the last good sync may not be durable"
        raise LogFailed(self._failed) from None

    def _write(self, sealed: list[tuple[StreamWriter, Sealed]]) -> dict[int, int]:
        """One pass over the group's streams per step, and two syncs in all.

        The Arrow work is done for all streams at once
        (:func:`~aqueduct.bridge.storage.pending.record_batches`); the
        streams :class:`OpenFiles` does not keep open have their files
        opened for their write and closed right after, so a commit touching
        10,000 streams never holds 10,000 segments and indexes open at once
        (the process's descriptor limit), and they are synced by name.
        """
        kept = self.open_files.keep((s.meta.stream_id, s.files) for s in dict.fromkeys(s for s, _ in sealed))
        last = {s: i for i, (s, _) in enumerate(sealed)}  # a held batch and a new one may share a stream
        data = SyncGroup()
        written: list[tuple[StreamFiles, int, IndexEntry]] = []
        for i, ((s, part), batch) in enumerate(zip(sealed, record_batches([part for _, part in sealed]), strict=True)):
            sid, files = s.meta.stream_id, s.files
            written.append((files, sid, files.write(part, batch, self.segment_bytes)))
            if last[s] == i:
                files.add_segment_to(data, keep_open=sid in kept)
        data.sync()  # the batches, before any index entry that points at them
        index = SyncGroup()
        for files, _, entry in written:
            if files.segment is not None:
                files.segment.created = False
            files.write_entry(entry, index)
        index.sync()
        for files, _, entry in written:
            files.entries.append(entry)  # visible from here on
        self._changes.record(sid for _, sid, _ in written)
        return {sid: entry.end_offset for _, sid, entry in written}
