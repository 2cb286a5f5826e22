"""``LOG/acked.json``: the offsets whose points of reference the bridge acked.

The reader's commit file trails Spark by one micro-batch; this record is
rewritten (by the log's I/O thread, :meth:`DurableLog.write_acked`) each
time the bridge acks a committed micro-batch, before the ACKs leave, so a
restarted bridge never tells a connector a lower point than before and
``aqueduct-bridge status`` can show how far producers were told their data
is safe.

It is kept twice, ``acked.json`` and ``acked.copy.json``, each with the
CRC32C of its offsets, each replaced atomically in turn: a copy that a crash,
a torn write or a flipped bit spoiled is reported and the other one read.
Writes only move forward, so of the good copies the newer is the larger
per stream, and reading takes per stream the largest offset a good copy
holds. Only when neither copy is good (two independent corruptions) are
the acked offsets lost: the bridge then acks from the commit files again,
which trail the last ACK by at most one micro-batch.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c

from aqueduct.bridge.storage.index import write_atomically
from aqueduct.bridge.storage.offset import SourceOffset

ACKED_FILE = "acked.json"
ACKED_COPY = "acked.copy.json"
ACKED_FILES = (ACKED_FILE, ACKED_COPY)

logger = logging.getLogger(__name__)


def offsets_checksum(offsets: Mapping[str, int]) -> int:
    """CRC32C of an offsets document (``acked.json``, a commit file) in a canonical form.

    Written with the offsets and checked on read: a flipped digit would
    otherwise ack or truncate what nobody committed.
    """
    return crc32c.crc32c(json.dumps(offsets, sort_keys=True, separators=(",", ":")).encode())


def checked_offsets(doc: Mapping[str, Any]) -> dict[int, int]:
    """The positions of an offsets document, after checking the CRC32C written with them.

    Raises ``ValueError`` (or ``KeyError``/``TypeError`` for a malformed
    document) when they fail; files written before checksums carry none.
    """
    positions = SourceOffset.parse(doc["offsets"]).stream_ids()
    stored = doc.get("crc32c")
    if stored is not None and stored != offsets_checksum(doc["offsets"]):
        raise ValueError(f"its offsets fail their CRC32C check (stored {stored:#010x})")
    return positions


@dataclass(frozen=True)
class AckedCopies:
    """What the copies of ``acked.json`` say, once read."""

    offsets: dict[int, int]
    #: when the newest good copy was written (``time.time()``); None if no copy is good
    acked_at: float | None
    #: every copy is there, good, and equal to the others: nothing to restore
    whole: bool


def _encode(positions: Mapping[int, int], acked_at: float) -> bytes:
    offsets = SourceOffset(positions).spark()
    return json.dumps({"offsets": offsets, "crc32c": offsets_checksum(offsets), "acked_at": acked_at}).encode()


def write_acked(log_dir: Path, positions: Mapping[int, int], acked_at: float | None = None) -> None:
    """Record the offsets whose points of reference the bridge acked, in both copies, durably.

    One copy after the other, each replaced atomically: a crash or a full
    disk leaves at most one of them old, never both gone.
    """
    data = _encode(positions, time.time() if acked_at is None else acked_at)
    for name in ACKED_FILES:
        write_atomically(log_dir / name, data)


def _read_copy(path: Path) -> tuple[dict[int, int], float] | None:
    """One copy's offsets and time; None if it is missing; ``ValueError`` & co. if it is spoiled."""
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    return checked_offsets(doc), float(doc["acked_at"])


def read_copies(log_dir: Path) -> AckedCopies:
    """Both copies read and merged: per stream the largest offset a good copy holds.

    A spoiled copy (not JSON, or failing the checksum written with its
    offsets) is reported and passed over; with no good copy left, the
    offsets read as empty and acks restart from the commit files.
    """
    good: list[tuple[dict[int, int], float]] = []
    spoiled = 0
    for name in ACKED_FILES:
        path = log_dir / name
        try:
            copy = _read_copy(path)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            spoiled += 1
            logger.error("%s is corrupt (%s); ignored", path, exc)
            continue
        if copy is not None:
            good.append(copy)
    if spoiled and not good:
        logger.error(
            "no good copy of %s is left: acks restart from the commit files, up to a micro-batch behind",
            log_dir / ACKED_FILE,
        )
    offsets: dict[int, int] = {}
    for positions, _ in good:
        for sid, offset in positions.items():
            offsets[sid] = max(offset, offsets.get(sid, offset))
    acked_at = max((at for _, at in good), default=None)
    whole = len(good) == len(ACKED_FILES) and all(positions == offsets for positions, _ in good)
    return AckedCopies(offsets, acked_at, whole or (not good and not spoiled))


def read_acked(log_dir: Path) -> dict[int, int]:
    """Offsets recorded by :func:`write_acked` (empty before the first commit)."""
    return read_copies(log_dir).offsets


def read_acked_at(log_dir: Path) -> tuple[dict[int, int], float | None]:
    """Offsets recorded by :func:`write_acked` and when (``time.time()``; None before the first commit)."""
    acked = read_copies(log_dir)
    return acked.offsets, acked.acked_at


def restore_acked(log_dir: Path) -> dict[int, int]:
    """The acked offsets, for a bridge that starts acking from them; both copies made whole first.

    After a crash between the two renames, or with one copy spoiled, the
    copies differ: the restarted bridge acks from the larger, so that one
    must be in both before a second fault can spoil the copy holding it.
    Only the bridge (the log's single writer) calls this; readers use
    :func:`read_acked`.
    """
    acked = read_copies(log_dir)
    if not acked.whole and acked.acked_at is not None:
        write_acked(log_dir, acked.offsets, acked.acked_at)
        logger.warning("restored both copies of %s: %s", log_dir / ACKED_FILE, acked.offsets)
    return acked.offsets
