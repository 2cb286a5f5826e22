"""New streams' files, created in batches on the log's I/O thread: two syncs for a fleet's NOTIFYs.

A fleet's NOTIFYs arrive by the thousand: created one by one, each stream
costs its own fsyncs (about 1 ms); created together, a batch costs two
syncs (see :class:`~aqueduct.bridge.storage.durability.SyncGroup`). A stream
is usable at once; its files are created before any group commit holding
its records, so the event loop never waits for their fsyncs.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from aqueduct.bridge.storage.changes import ChangeJournal
from aqueduct.bridge.storage.durability import SyncGroup
from aqueduct.bridge.storage.stream_writer import StreamWriter


class StreamCreation:
    """The streams whose files the next creation job makes: (writer, its answer, point of reference)."""

    def __init__(self, streams_dir: Path, io: ThreadPoolExecutor, changes: ChangeJournal) -> None:
        self._streams_dir = streams_dir
        self._io = io
        self._changes = changes
        self._queued: list[tuple[StreamWriter, Future[int], int]] = []
        self._lock = threading.Lock()

    def queue(self, s: StreamWriter, reference: int) -> Future[int]:
        """Have the I/O thread create the stream's files with the others queued meanwhile.

        The batch job is queued when the first stream joins an empty queue,
        so it runs before any group commit submitted after that stream's
        records. The future resolves to ``reference``.
        """
        done: Future[int] = Future()
        with self._lock:
            self._queued.append((s, done, reference))
            first = len(self._queued) == 1
        if first:
            self._io.submit(self._create_queued)
        return done

    def _create_queued(self) -> None:
        """Create every queued stream's files with two syncs in all (I/O thread)."""
        with self._lock:
            queued, self._queued = self._queued, []
        waiting: dict[StreamWriter, list[tuple[Future[int], int]]] = {}
        for s, done, reference in queued:
            waiting.setdefault(s, []).append((done, reference))
        group = SyncGroup()
        written: list[StreamWriter] = []
        for s, answers in waiting.items():
            try:
                s.files.write_new_files(s.meta, group)
            except OSError as exc:  # out of descriptors, a full disk: this stream retries later
                for done, _ in answers:
                    done.set_exception(exc)
            else:
                written.append(s)
        try:
            group.sync()
            for s in written:
                s.files.name_new_files(group)
            group.add_dir(self._streams_dir)
            group.sync()
        except OSError as exc:
            for s in written:
                for done, _ in waiting[s]:
                    done.set_exception(exc)
            return
        for s in written:
            s.files.created = True
        self._changes.record(s.meta.stream_id for s in written)
        for s in written:
            for done, reference in waiting[s]:
                done.set_result(reference)
