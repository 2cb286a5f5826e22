"""The per-stream index: the only thing a log reader trusts.

A stream's data lives in Arrow IPC segment files; which bytes of them are
data is decided by the index alone. Each group commit appends one
fixed-size, CRC-protected entry per stream *after* the batch bytes were
fsynced, and fsyncs the index. So:

- a batch written but not indexed (crash between the two fsyncs) is
  invisible, and the writer cuts it off when it reopens the log;
- a torn index entry (crash in the middle of its write) fails its CRC or
  is short, and it and everything after it is ignored;
- a reader in another process may see the index while it grows: it reads
  the valid prefix, which only ever refers to fsynced bytes.

An entry also carries the stream's state after its batch (point of
reference, end of the last complete epoch, epoch counter), so reopening
the log and answering position questions needs no scan of the data, and
the CRC32C of the batch's bytes, which every read checks
(:func:`aqueduct.bridge.storage.segment.read_batches`): a flipped bit on disk is
reported, never returned.

The magic says the entry format: version 1 entries (written before
batches had checksums) have no checksum field; version 2 entries have
one and a flag saying whether it is set. The writer rewrites a version 1
index as version 2 when it opens the log (:func:`is_current` tells, and
:func:`rewrite_index` rewrites), with the old entries flagged unchecked, so
every batch written from then on has a checksum and old logs keep opening.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from aqueduct.bridge.storage.durability import fsync_path

MAGIC_V1 = b"AQIDX\x00\x00\x01"
MAGIC = b"AQIDX\x00\x00\x02"

# segment, position, length, first_offset, count, reference_before,
# reference_after, complete_after, first_epoch, last_epoch, next_epoch,
# flags, written_at_us, (version 2:) the batch's CRC32C; then a CRC32 of
# all of these.
_BODY_V1 = struct.Struct("<QQIQIQQQQQQBQ")
_BODY = struct.Struct("<QQIQIQQQQQQBQI")
_CRC = struct.Struct("<I")
ENTRY_SIZE = _BODY.size + _CRC.size
ENTRY_SIZE_V1 = _BODY_V1.size + _CRC.size

FLAG_USES_BOUNDARIES = 1
FLAG_CHECKSUMMED = 2


class IndexCorrupt(Exception):
    """The index contradicts itself in a way a crash cannot explain."""


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One committed record batch of a stream, and the stream state after it.

    Offsets are record counts within the stream; ``segment`` names the
    segment file by the offset of its first record.
    """

    segment: int
    position: int
    length: int
    first_offset: int
    count: int
    reference_before: int
    reference_after: int
    complete_after: int
    first_epoch: int
    last_epoch: int
    next_epoch: int
    uses_boundaries: bool
    written_at_us: int
    #: CRC32C of the batch's stored bytes; None for a batch written before checksums
    checksum: int | None = None

    @property
    def end_offset(self) -> int:
        """Exclusive end offset of the batch."""
        return self.first_offset + self.count


def encode_entry(e: IndexEntry) -> bytes:
    """Serialize an entry with its CRC."""
    body = _BODY.pack(
        e.segment,
        e.position,
        e.length,
        e.first_offset,
        e.count,
        e.reference_before,
        e.reference_after,
        e.complete_after,
        e.first_epoch,
        e.last_epoch,
        e.next_epoch,
        (FLAG_USES_BOUNDARIES if e.uses_boundaries else 0)
        | (FLAG_CHECKSUMMED if e.checksum is not None else 0),
        e.written_at_us,
        e.checksum or 0,
    )
    return body + _CRC.pack(zlib.crc32(body))


def _decode_entry(raw: bytes, layout: struct.Struct) -> IndexEntry | None:
    body = raw[: layout.size]
    (crc,) = _CRC.unpack_from(raw, layout.size)
    if zlib.crc32(body) != crc:
        return None
    f = layout.unpack(body)
    checked = len(f) > 13 and f[11] & FLAG_CHECKSUMMED
    return IndexEntry(
        segment=f[0],
        position=f[1],
        length=f[2],
        first_offset=f[3],
        count=f[4],
        reference_before=f[5],
        reference_after=f[6],
        complete_after=f[7],
        first_epoch=f[8],
        last_epoch=f[9],
        next_epoch=f[10],
        uses_boundaries=bool(f[11] & FLAG_USES_BOUNDARIES),
        written_at_us=f[12],
        checksum=f[13] if checked else None,
    )


def decode_entries(data: bytes) -> tuple[list[IndexEntry], int]:
    """Decode the valid prefix of an index file's bytes.

    Returns the entries and the number of bytes they span. Decoding stops
    at a short or CRC-failing entry, or at one that does not continue its
    predecessor (a torn or stale tail); the caller decides whether to cut
    the rest off (the writer) or just ignore it (a reader). Either entry
    format (see the module's docstring) decodes. A CRC-failing entry with
    an intact one after it is no torn tail but changed bytes: that raises
    :class:`IndexCorrupt`, so nobody cuts acknowledged batches off as if a
    crash had torn them.
    """
    if len(data) < len(MAGIC):
        return [], 0
    layout = _layout(data[: len(MAGIC)])
    entries = _decode_run(data[len(MAGIC) :], len(MAGIC), layout, None, 0)
    return entries, len(MAGIC) + len(entries) * (layout.size + _CRC.size)


def _layout(magic: bytes) -> struct.Struct:
    """The entry layout an index's magic announces."""
    if magic == MAGIC:
        return _BODY
    if magic == MAGIC_V1:
        return _BODY_V1
    raise IndexCorrupt("index file does not start with the aqueduct index magic")


def _decode_run(
    data: bytes, origin: int, layout: struct.Struct, previous: IndexEntry | None, number: int
) -> list[IndexEntry]:
    """Decode whole entries from the start of ``data`` until the valid run ends.

    ``data`` starts at byte ``origin`` of the file, after ``number`` entries
    the last of which is ``previous``: the full load and the tail reload
    (:func:`read_index`) stop, and report a corrupt entry, at the same place
    with the same words.
    """
    size = layout.size + _CRC.size
    entries: list[IndexEntry] = []
    pos = 0
    while pos + size <= len(data):
        entry = _decode_entry(data[pos : pos + size], layout)
        if entry is None:
            if _intact_after(data, pos + size, size, layout):
                raise IndexCorrupt(
                    f"index entry {number + len(entries)} (byte {origin + pos}) fails its CRC but a later "
                    "entry is intact: the index is corrupt, not torn (a crash tears only the last entry)"
                )
            break
        last = entries[-1] if entries else previous
        if last is not None and entry.first_offset != last.end_offset:
            break
        entries.append(entry)
        pos += size
    return entries


def _intact_after(data: bytes, pos: int, size: int, layout: struct.Struct) -> bool:
    """True if some whole entry from ``pos`` on passes its CRC."""
    return any(_decode_entry(data[p : p + size], layout) is not None for p in range(pos, len(data) - size + 1, size))


def is_current(path: Path) -> bool:
    """True unless ``path`` is an index in the entry format before checksums (or absent)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) != MAGIC_V1
    except FileNotFoundError:
        return True


def read_entries(path: Path) -> tuple[list[IndexEntry], int]:
    """Read the valid entries of an index file (empty if it does not exist)."""
    snapshot = read_index(path)
    return list(snapshot.entries), snapshot.valid


@dataclass(frozen=True, slots=True)
class IndexSnapshot:
    """What a reader last read of an index file: its valid entries, and what lets it read on.

    An index only grows between rewrites, and a rewrite (truncation, the
    format upgrade) replaces the file, so a later read of the same inode
    needs only the bytes after ``valid``. ``head`` and ``tail`` are the
    file's first and last valid entries as bytes, read again to confirm
    that the file still holds what this snapshot decoded: the writer cuts
    an entry it failed to sync off in place, and a file system may give a
    rewritten index its predecessor's inode number.
    """

    entries: tuple[IndexEntry, ...]
    #: bytes the entries span, the magic included (0: no index file, or not even its magic)
    valid: int
    inode: int
    head: bytes
    tail: bytes


def read_index(path: Path, previous: IndexSnapshot | None = None) -> IndexSnapshot:
    """The valid entries of an index file, as :func:`read_entries` finds them.

    Given the snapshot of an earlier call, and the file is the same one
    and at least as long, only the bytes appended since are read and
    decoded (checked exactly as a full read checks them, torn or corrupt
    entries included); anything else reads the whole file. A planner that
    asks after every group commit then pays for the new entries, not for
    the thousands an index gathers before truncation shrinks it.
    """
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return IndexSnapshot((), 0, 0, b"", b"")
    with f:
        st = os.fstat(f.fileno())  # the file read below, whatever replaces the path meanwhile
        if previous and previous.entries and previous.inode == st.st_ino and st.st_size >= previous.valid:
            appended = _read_appended(f, previous)
            if appended is not None:
                return appended
        f.seek(0)
        data = f.read()
    try:
        entries, valid = decode_entries(data)
    except IndexCorrupt as e:
        raise IndexCorrupt(f"{path}: {e}") from None
    size = (valid - len(MAGIC)) // len(entries) if entries else 0  # one entry's bytes, either format
    return IndexSnapshot(tuple(entries), valid, st.st_ino, data[: len(MAGIC) + size], data[valid - size : valid])


def _read_appended(f: BinaryIO, previous: IndexSnapshot) -> IndexSnapshot | None:
    """``previous`` and the entries appended after it, or None if the file is not its continuation."""
    size = len(previous.tail)
    f.seek(0)
    if f.read(len(previous.head)) != previous.head:
        return None
    f.seek(previous.valid - size)
    data = f.read()
    if data[:size] != previous.tail:
        return None
    try:
        layout = _layout(previous.head[: len(MAGIC)])
        added = _decode_run(data[size:], previous.valid, layout, previous.entries[-1], len(previous.entries))
    except IndexCorrupt as e:
        raise IndexCorrupt(f"{f.name}: {e}") from None
    if not added:
        return previous
    n = len(added)
    return IndexSnapshot(
        previous.entries + tuple(added), previous.valid + n * size, previous.inode, previous.head,
        data[n * size : (n + 1) * size],  # data starts with the previous last entry
    )  # fmt: skip


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves old or new, never a mix."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_path(path.parent)


def rewrite_index(path: Path, entries: list[IndexEntry]) -> None:
    """Atomically replace an index with the given entries (used by truncation)."""
    write_atomically(path, MAGIC + b"".join(encode_entry(e) for e in entries))
