"""A real flipped bit in a real segment file: how the corruption tests damage a log."""

from __future__ import annotations

from pathlib import Path

from aqueduct.bridge.storage.index import IndexEntry
from aqueduct.bridge.storage.segment import segment_name
from aqueduct.bridge.storage.view import load_streams


def flip_a_bit_in_stored_batch(log: Path, sid: int, entry: int) -> IndexEntry:
    """Flip one bit in the middle of stream ``sid``'s stored batch number ``entry``, in place; its index entry."""
    stream = load_streams(log)[sid]
    bad = stream.entries[entry]
    segment = stream.directory / segment_name(bad.segment)
    data = bytearray(segment.read_bytes())
    data[bad.position + bad.length // 2] ^= 0x10
    segment.write_bytes(bytes(data))
    return bad
