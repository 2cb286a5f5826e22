"""Segment files: append-only Arrow IPC streams of one log partition.

A segment starts with the IPC schema message of :data:`STORED_SCHEMA`,
followed by encapsulated record batch messages, one per group commit. It
is a valid Arrow IPC stream (without the optional end-of-stream marker),
so ordinary Arrow tools can open it; but the log never scans it: the
index says where each batch starts and how long it is, so a reader
memory-maps the file and decodes exactly the indexed bytes, zero-copy.

Each batch's CRC32C (the checksum Kafka stores per record batch) is taken
when it is written and kept in its index entry; every read checks it
before decoding, so a byte changed on disk is reported as
:class:`BatchCorrupt`, naming where, and never returned. CRC32C and not
``zlib.crc32``: the ``crc32c`` package uses the CPU's CRC instruction
(about 22 GB/s here against zlib's 2.3 GB/s; ``bench/checksum_cost.py``
measures what it adds to ingest and reads).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import crc32c
import pyarrow as pa

from aqueduct.bridge.storage.durability import SyncGroup
from aqueduct.bridge.storage.index import IndexEntry
from aqueduct.bridge.storage.schema import STORED_SCHEMA

SUFFIX = ".arrow"

#: Bytes at the start of every segment: the schema message.
HEADER: bytes = STORED_SCHEMA.serialize().to_pybytes()


def segment_name(base_offset: int) -> str:
    """File name of the segment whose first record has ``base_offset``."""
    return f"{base_offset:020d}{SUFFIX}"


def segment_bases(directory: Path) -> list[int]:
    """Base offsets of the segment files present in a stream directory."""
    bases = []
    for p in directory.glob("*" + SUFFIX):
        stem = p.name[: -len(SUFFIX)]
        if stem.isdigit():
            bases.append(int(stem))
    return sorted(bases)


class BatchCorrupt(Exception):
    """A stored batch's bytes do not match the checksum written with them."""

    def __init__(self, directory: Path, entry: IndexEntry, found: int) -> None:
        self.directory = directory
        self.entry = entry
        log = directory.parent.parent
        super().__init__(
            f"log {str(log)!r} stream {directory.name} records [{entry.first_offset}, "
            f"{entry.end_offset}) are corrupt: the batch at byte {entry.position} of segment "
            f"{segment_name(entry.segment)} fails its CRC32C check (stored {entry.checksum:#010x}, "
            f"read {found:#010x})"
        )

    @property
    def records(self) -> tuple[int, int]:
        """The offset range ``[first, end)`` of the records lost with the batch."""
        return self.entry.first_offset, self.entry.end_offset


def checksum(data: bytes | memoryview | pa.Buffer) -> int:
    """The CRC32C a batch's index entry carries."""
    return crc32c.crc32c(data)


def write_all(fd: int, data: bytes | memoryview | pa.Buffer) -> None:
    """Write every byte (os.write may write fewer than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class SegmentWriter:
    """Appends serialized batches to one segment file.

    Opening an existing segment cuts it to ``valid_length``: bytes after
    the last indexed batch are a torn or unindexed tail from a crash and
    must never become the prefix of a later batch. The cut is made durable
    with the batch written after it: a segment is opened only to be
    written, and its sync (:meth:`add_to`) comes before any index entry
    points past ``valid_length``; a crash before that sync leaves a tail
    the next opening cuts again. (An fsync per cut made the first group
    commit after a writer was killed mid-commit cost an fsync per stream:
    4.9 s over 2,000 streams.)

    ``directory`` is a string, not a :class:`~pathlib.Path`: a commit
    over thousands of streams opens thousands of segments, and pathlib's
    joins cost more than the ``open`` itself.
    """

    def __init__(self, directory: str, base: int, valid_length: int | None) -> None:
        self.base = base
        self.directory = directory
        self.path = path = os.path.join(directory, segment_name(base))
        #: created since the last sync: its directory entry is not durable yet
        self.created = valid_length is None
        if valid_length is None:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            write_all(self._fd, HEADER)
            self.size = len(HEADER)
        else:
            self._fd = os.open(path, os.O_WRONLY)
            size = os.fstat(self._fd).st_size
            if size < valid_length:
                os.close(self._fd)
                raise OSError(
                    f"segment {path} is shorter than its index says ({valid_length} bytes)"
                )
            if size > valid_length:  # a torn tail: cut it (durable with the next batch's sync)
                os.ftruncate(self._fd, valid_length)
            self.size = valid_length
        os.lseek(self._fd, self.size, os.SEEK_SET)

    def append(self, batch: pa.RecordBatch) -> tuple[int, int, int]:
        """Write a batch (not yet durable); return its (position, length, checksum)."""
        message = batch.serialize()
        position = self.size
        write_all(self._fd, message)
        self.size += message.size
        return position, message.size, checksum(message)

    def sync(self) -> None:
        """Make every appended batch durable (and the file itself, if just created)."""
        group = SyncGroup()
        self.add_to(group)
        group.sync()
        self.created = False

    def add_to(self, group: SyncGroup, *, closing: bool = False) -> None:
        """Have ``group`` make every appended batch durable (see :class:`SyncGroup`).

        A segment created since the last sync adds its directory too: an
        index entry must never point into a file a crash could unlink. Once
        the group synced, the caller clears :attr:`created`. ``closing``:
        the caller closes the segment before the group syncs, so the group
        syncs it by name, not by a descriptor that may be reused meanwhile.
        """
        if closing:
            group.add_path(self.path)
        else:
            group.add_file(self._fd)
        if self.created:
            group.add_dir(self.directory)

    def close(self) -> None:
        """Release the file descriptor."""
        os.close(self._fd)


def read_batches(
    directory: Path,
    entries: Sequence[IndexEntry],
    start: int,
    end: int,
    on_corrupt: Callable[[BatchCorrupt], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the stored records with offsets in ``[start, end)``, in order.

    ``entries`` are the index entries covering that range. Each segment is
    memory-mapped once; batches are sliced, never copied. A batch whose
    checksum fails raises :class:`BatchCorrupt`, or, given ``on_corrupt``,
    is passed to it and skipped (the caller counts the loss).
    """
    mapped: tuple[int, pa.Buffer] | None = None
    for e in entries:
        lo, hi = max(start, e.first_offset), min(end, e.end_offset)
        if lo >= hi:
            continue
        if mapped is None or mapped[0] != e.segment:
            # The buffer keeps the mapping alive after the file object is closed.
            with pa.memory_map(str(directory / segment_name(e.segment))) as mm:
                mapped = (e.segment, mm.read_buffer())
        stored = mapped[1].slice(e.position, e.length)
        if e.checksum is not None and (found := checksum(stored)) != e.checksum:
            corrupt = BatchCorrupt(directory, e, found)
            if on_corrupt is None:
                raise corrupt
            on_corrupt(corrupt)
            continue
        batch = pa.ipc.read_record_batch(stored, STORED_SCHEMA)
        yield batch.slice(lo - e.first_offset, hi - lo)
