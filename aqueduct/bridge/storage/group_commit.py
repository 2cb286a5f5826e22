"""The group commit pipeline: seal every stream's pending records, then write, sync, index, sync.

One commit makes everything appended since the last one durable and
visible, however many streams it touches: on the caller's thread each
stream's pending records are sealed (later appends go to the next group);
on the log's I/O thread each becomes one Arrow record batch written to its
stream's segment, every touched segment is made durable, then one index
entry per stream is appended and the indexes are made durable (two syncs per
commit: one ``syncfs`` each beyond a few files, see
:mod:`aqueduct.bridge.storage.durability`). Only then are the records
visible. A crash at any point leaves a log whose indexes describe exactly
the batches that were fully written.

A full disk holds the group (written first by the next commit, see
:class:`~aqueduct.bridge.storage.errors.LogFull`); any other failed write
stops the log for good (:class:`~aqueduct.bridge.storage.errors.LogFailed`).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from aqueduct.bridge.storage.changes import ChangeJournal
from aqueduct.bridge.storage.durability import SyncGroup
from aqueduct.bridge.storage.errors import NO_ROOM, LogFailed, LogFull
from aqueduct.bridge.storage.open_files import OpenFiles
from aqueduct.bridge.storage.pending import Sealed
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

        Streams are written ``open_files.limit`` at a time, so a group
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
        step = self.open_files.limit
        for i in range(0, len(sealed), step):
            part = sealed[i : i + step]
            try:
                ends |= self._write_some(part)
            except OSError as exc:
                self._held = sealed[i:]
                self._give_up_on(part, exc)
        return ends

    def _give_up_on(self, part: list[tuple[StreamWriter, Sealed]], exc: OSError) -> None:
        """Cut off what the failed step wrote and raise what it means (I/O thread)."""
        what = f"log {self._where!r}: group commit failed: {exc.strerror or exc}"
        if exc.errno in NO_ROOM:
            try:
                for s in dict.fromkeys(s for s, _ in part):
                    self.open_files.forget(s.meta.stream_id)
                    s.files.roll_back()
            except OSError as cut:
                self._failed = f"{what}; then cutting it off failed: {cut.strerror or cut}"
                raise LogFailed(self._failed) from None
            raise LogFull(f"{what}; {sum(len(p.pending.payload) for _, p in self._held)} records held, not durable yet") from None
        self._failed = f"{what} (errno {exc.errno}): what was written since the last good sync may not be durable"
        raise LogFailed(self._failed) from None

    def _write_some(self, sealed: list[tuple[StreamWriter, Sealed]]) -> dict[int, int]:
        for s, _ in sealed:
            self.open_files.use(s.meta.stream_id, s.files)
        written = [(s.files, s.meta.stream_id, s.files.write(part, self.segment_bytes)) for s, part in sealed]
        data = SyncGroup()
        for files, _, _ in written:
            assert files.segment is not None
            files.segment.add_to(data)
        data.sync()  # the batches, before any index entry that points at them
        index = SyncGroup()
        for files, _, entry in written:
            assert files.segment is not None
            files.segment.created = False
            files.write_entry(entry, index)
        index.sync()
        for files, _, entry in written:
            files.entries.append(entry)  # visible from here on
        self._changes.record(sid for _, sid, _ in written)
        self.open_files.trim()  # least recently written first
        return {sid: entry.end_offset for _, sid, entry in written}
