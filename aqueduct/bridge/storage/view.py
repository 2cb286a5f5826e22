"""A read-only view of a durable log, safe while the writer appends.

The Spark source (running in processes the JVM spawns) and the writer
itself answer position questions through :class:`StreamIndex`: it holds a
snapshot of a stream's valid index entries and reads record columns from
memory-mapped segments. Nothing here writes, locks, or trusts bytes the
index does not vouch for.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from aqueduct.bridge.storage.changes import CHANGES_FILE, ChangeReader
from aqueduct.bridge.storage.corruption import corrupt_handler
from aqueduct.bridge.storage.index import IndexEntry, IndexSnapshot, read_index
from aqueduct.bridge.storage.segment import BatchCorrupt, read_batches
from aqueduct.wire.modes import Mode

FORMAT_FILE = "FORMAT"
FORMAT_TEXT = "aqueduct-log 1\n"
STREAMS_DIR = "streams"
INDEX_FILE = "index"
META_FILE = "meta.json"


class NotALog(ValueError):
    """The path is not an aqueduct log directory."""


def check_log_dir(path: Path) -> None:
    """Raise :class:`NotALog` with a specific reason unless ``path`` is a log."""
    if not path.is_dir():
        raise NotALog(f"log path {str(path)!r} does not exist or is not a directory")
    fmt = path / FORMAT_FILE
    if not fmt.is_file() or fmt.read_text() != FORMAT_TEXT:
        raise NotALog(f"log path {str(path)!r} is not an aqueduct log (no {FORMAT_FILE} file)")


@dataclass(frozen=True)
class StreamMeta:
    """What a stream is: its id, name, owning connector and identity, and delivery mode.

    The mode decides its point of reference: an ORDERED stream's ids
    strictly increase (point = last stable id + 1, gaps allowed), an
    UNORDERED or UNRELIABLE one's are consecutive (point = first id not
    received). Logs written before the mode was stored say ``"ordered":
    true|false``; that still reads.

    ``owner`` is the subject of the producer identity that first wrote the
    stream (a token's or a client certificate's), ``""`` while only
    ``anonymous`` sessions (the shared cookie) wrote it, and in logs written
    before identities existed.
    """

    stream_id: int
    stream_name: str
    connector: str
    mode: Mode = Mode.ORDERED
    owner: str = ""

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "stream_id": self.stream_id,
                "stream_name": self.stream_name,
                "connector": self.connector,
                "mode": self.mode.value,
                **({"owner": self.owner} if self.owner else {}),
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> StreamMeta:
        d = json.loads(data)
        if "mode" in d:
            mode = Mode(d["mode"])
        else:  # written before modes were stored
            mode = Mode.ORDERED if d["ordered"] else Mode.UNORDERED
        return cls(int(d["stream_id"]), d["stream_name"], d["connector"], mode, str(d.get("owner", "")))


@dataclass(frozen=True)
class StreamIndex:
    """A snapshot of one stream's committed batches and the state after them.

    Position questions (:meth:`epoch_at`, :meth:`first_offset_of_epoch_at_least`,
    :meth:`reference_at`) read a batch's columns, checked like any read: a
    corrupt batch is recorded in ``LOG/corrupt/`` and raises
    :class:`BatchCorrupt`, or with ``skip_corrupt`` (the source's
    ``failOnDataLoss=false``) is answered from the index alone.
    """

    meta: StreamMeta
    directory: Path
    entries: Sequence[IndexEntry]
    #: whether position questions skip a corrupt batch (and answer from its index entry) or raise
    skip_corrupt: bool = field(default=False, compare=False)

    @property
    def stream_id(self) -> int:
        return self.meta.stream_id

    @property
    def earliest(self) -> int:
        """First offset still stored (above what truncation dropped)."""
        return self.entries[0].first_offset if self.entries else 0

    @property
    def end(self) -> int:
        """Exclusive end of the committed records."""
        return self.entries[-1].end_offset if self.entries else 0

    @property
    def complete(self) -> int:
        """End of the last closed epoch: only records below it may be read by Spark."""
        return self.entries[-1].complete_after if self.entries else 0

    @property
    def reference(self) -> int:
        """The durable point of reference (after every committed record)."""
        return self.entries[-1].reference_after if self.entries else 0

    def _entry_index(self, offset: int) -> int:
        if not self.earliest <= offset < self.end:
            raise IndexError(
                f"offset {offset} of stream {self.stream_id} is not stored "
                f"(stored: [{self.earliest}, {self.end}))"
            )
        return bisect.bisect_right(self.entries, offset, key=lambda e: e.first_offset) - 1

    def entries_between(self, start: int, end: int) -> list[IndexEntry]:
        """Index entries holding any record with offset in ``[start, end)``."""
        if start >= end:
            return []
        lo = self._entry_index(start)
        hi = self._entry_index(end - 1)
        return list(self.entries[lo : hi + 1])

    def read(
        self, start: int, end: int, on_corrupt: Callable[[BatchCorrupt], None] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Stored-schema batches of the records with offsets in ``[start, end)``.

        A batch failing its checksum raises :class:`BatchCorrupt` (or goes
        to ``on_corrupt``, see :func:`read_batches`).
        """
        return self._batches(self.entries_between(start, end), start, end, on_corrupt)

    def _batches(
        self,
        entries: Sequence[IndexEntry],
        start: int,
        end: int,
        on_corrupt: Callable[[BatchCorrupt], None] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Where the records' columns come from: the segment files."""
        return read_batches(self.directory, entries, start, end, on_corrupt)

    def _lookup(self, e: IndexEntry, start: int, end: int) -> pa.RecordBatch | None:
        """Records ``[start, end)`` of ``e``'s batch for a position question; None if it is corrupt and skipped.

        The one place position questions read records (a remote view asks
        its bridge instead), under the same rule as every read
        (:func:`~aqueduct.bridge.storage.corruption.corrupt_handler`).
        """
        batches = list(self._batches([e], start, end, corrupt_handler(self.skip_corrupt)))
        return batches[0] if batches else None

    def reference_at(self, offset: int) -> int:
        """Point of reference covering every record below ``offset``.

        An ACK carrying it tells the producer that all it sent below that
        point is safe, which is exactly true once Spark committed every
        record below ``offset``. At a batch's end the index answers; inside
        a corrupt batch, the point before it (never more than is safe).
        """
        if offset == self.earliest:
            return self.entries[0].reference_before if self.entries else 0
        e = self.entries[self._entry_index(offset - 1)]
        if offset == e.end_offset:
            return e.reference_after
        try:
            batch = self._lookup(e, offset - 1, offset)
        except BatchCorrupt:
            batch = None
        return e.reference_before if batch is None else batch.column("reference")[0].as_py()

    def epoch_at(self, offset: int) -> int:
        """Epoch number of the record at ``offset``.

        A corrupt batch skipped counts as one epoch, its last (its index
        entry's ``last_epoch``), and :meth:`first_offset_of_epoch_at_least`
        answers alike: the boundaries inside it cannot be read, its records
        are lost whole anyway, and every epoch outside it keeps its edges.
        """
        e = self.entries[self._entry_index(offset)]
        batch = self._lookup(e, offset, offset + 1)
        return e.last_epoch if batch is None else batch.column("epoch")[0].as_py()

    def first_offset_of_epoch_at_least(self, epoch: int) -> int:
        """Smallest stored offset whose epoch is ``>= epoch`` (``end`` if none).

        Epoch numbers never decrease along a stream, so both the entries
        (by their last epoch) and a batch's epoch column are sorted.
        """
        k = bisect.bisect_left(self.entries, epoch, key=lambda e: e.last_epoch)
        if k == len(self.entries):
            return self.end
        e = self.entries[k]
        # Imported here, not when the module loads: a new query's planner process imports this
        # module and needs pyarrow.compute only when a trigger limit cuts inside an epoch
        # (the source's admission); the import costs about 0.1 s (see the source's read_partition).
        import pyarrow.compute as pc

        batch = self._lookup(e, e.first_offset, e.end_offset)
        if batch is None:  # corrupt and skipped: all its records count as its last epoch, >= epoch
            return e.first_offset
        below = pc.sum(pc.less(batch.column("epoch"), epoch)).as_py() or 0
        return e.first_offset + below


def _load_stream(
    directory: Path, previous: IndexSnapshot | None = None, skip_corrupt: bool = False
) -> tuple[StreamIndex, IndexSnapshot] | None:
    """A stream's snapshot and its index's, reading only what was appended to ``previous``."""
    try:
        meta = StreamMeta.from_json((directory / META_FILE).read_bytes())
    except FileNotFoundError:
        return None
    index = read_index(directory / INDEX_FILE, previous)
    return StreamIndex(meta, directory, index.entries, skip_corrupt), index


def load_stream(path: Path, stream_id: int) -> StreamIndex | None:
    """Snapshot one stream of the log at ``path`` (None if the log has no such stream)."""
    loaded = _load_stream(path / STREAMS_DIR / str(stream_id))
    return None if loaded is None else loaded[0]


def load_streams(path: Path) -> dict[int, StreamIndex]:
    """Snapshot every stream of the log at ``path``, keyed by stream id."""
    check_log_dir(path)
    streams: dict[int, StreamIndex] = {}
    root = path / STREAMS_DIR
    if not root.is_dir():
        return streams
    for d in root.iterdir():
        if d.is_dir() and d.name.isdigit():
            loaded = _load_stream(d)
            if loaded is not None:
                streams[loaded[0].stream_id] = loaded[0]
    return dict(sorted(streams.items()))


@dataclass(frozen=True)
class _Known:
    """A stream as :class:`LogSnapshots` last read it."""

    key: tuple[int, int, int] | None  # its index's inode, size and mtime before that read
    stream: StreamIndex
    index: IndexSnapshot  # where a reload reads on from


class LogSnapshots:
    """:func:`load_streams` for a caller that asks again and again (Spark's planner).

    Each call reloads only the streams the writer's change journal names
    since the previous call (:mod:`aqueduct.bridge.storage.changes`); the others
    keep their snapshot. When the journal cannot be trusted (first call, a
    new writer, a rotated journal, the periodic safety rescan) every stream
    is listed and ``stat``-ed, and only indexes whose inode, size or
    modification time changed are read again. Planning over 10,000 quiet
    streams then reads one small file, not 10,000. A reload reads only the
    entries appended to the index since (:func:`read_index`), so a stream's
    reload costs what its last group commits added, not the thousands of
    entries its index holds before truncation rewrites it.

    ``skip_corrupt`` is the snapshots' :attr:`StreamIndex.skip_corrupt`
    (the reading query's ``failOnDataLoss=false``).
    """

    def __init__(self, path: Path, skip_corrupt: bool = False) -> None:
        check_log_dir(path)
        self.path = path
        self.skip_corrupt = skip_corrupt
        self._changes = ChangeReader(path / CHANGES_FILE)
        self._known: dict[int, _Known] = {}
        self._last: dict[int, StreamIndex] | None = None
        #: the streams the last :meth:`load` reloaded; None when it rescanned them all
        self.changed: set[int] | None = None

    def load(self) -> dict[int, StreamIndex]:
        """Every stream by id, in id order; the very same dict as last time if nothing changed."""
        changed = self._changes.poll()
        self.changed = changed if self._last is not None else None
        if changed is None or self._last is None:
            self._rescan()
            self._last = {sid: self._known[sid].stream for sid in sorted(self._known)}
            return self._last
        if not changed:
            return self._last
        root = self.path / STREAMS_DIR
        for sid in changed:
            self._reload(sid, f"{root}/{sid}")
        last = dict(self._last)  # a copy keeps the id order while only values change
        for sid in changed:
            if sid in self._known:
                last[sid] = self._known[sid].stream
            else:
                last.pop(sid, None)
        if len(last) != len(self._known):  # a new stream: the order must be rebuilt
            last = {sid: self._known[sid].stream for sid in sorted(self._known)}
        self._last = last
        return last

    def _load(self, directory: str, key: tuple[int, int, int] | None, cached: _Known | None) -> _Known | None:
        loaded = _load_stream(Path(directory), cached.index if cached is not None else None, self.skip_corrupt)
        return None if loaded is None else _Known(key, *loaded)

    def _reload(self, sid: int, directory: str) -> None:
        known = self._load(directory, _index_key(directory), self._known.get(sid))  # the key first:
        if known is None:  # an append after it makes the next rescan read again, not miss it
            self._known.pop(sid, None)
        else:
            self._known[sid] = known

    def _rescan(self) -> None:
        known: dict[int, _Known] = {}
        try:
            listing = os.scandir(self.path / STREAMS_DIR)
        except FileNotFoundError:
            self._known = known
            return
        with listing:
            for d in listing:  # the directory entry's type comes with the listing: no stat
                if not (d.name.isdigit() and d.is_dir()):
                    continue
                key = _index_key(d.path)
                cached = self._known.get(int(d.name))
                if key is not None and cached is not None and cached.key == key:
                    known[int(d.name)] = cached
                    continue
                loaded = self._load(d.path, key, cached)
                if loaded is not None:
                    known[loaded.stream.stream_id] = loaded
        self._known = known


def _index_key(directory: str) -> tuple[int, int, int] | None:
    """What tells an index apart from its next version: it only grows, or is replaced whole."""
    try:
        st = os.stat(f"{directory}/{INDEX_FILE}")
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)
