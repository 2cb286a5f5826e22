"""``LOG/acked.json``: the offsets whose points of reference the bridge acked.

The reader's commit file trails Spark by one micro-batch; this one is
rewritten (by the log's I/O thread, :meth:`DurableLog.write_acked`) each
time the bridge acks a committed micro-batch, so ``aqueduct-bridge status``
can show how far producers were told their data is safe.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import crc32c

from aqueduct.bridge.storage.index import write_atomically
from aqueduct.bridge.storage.offset import SourceOffset

ACKED_FILE = "acked.json"

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


def write_acked(log_dir: Path, positions: Mapping[int, int]) -> None:
    """Record the offsets whose points of reference the bridge acked (atomically, durably)."""
    offsets = SourceOffset(positions).spark()
    doc = {"offsets": offsets, "crc32c": offsets_checksum(offsets), "acked_at": time.time()}
    write_atomically(log_dir / ACKED_FILE, json.dumps(doc).encode())


def read_acked(log_dir: Path) -> dict[int, int]:
    """Offsets recorded by :func:`write_acked` (empty before the first commit)."""
    return read_acked_at(log_dir)[0]


def read_acked_at(log_dir: Path) -> tuple[dict[int, int], float | None]:
    """Offsets recorded by :func:`write_acked` and when (``time.time()``; None before the first commit).

    A restarted bridge starts its acks from these, so a file whose bytes
    changed (not JSON, or failing the checksum written with its offsets)
    is reported and read as empty: acks then restart from the commit files,
    never from offsets nobody committed.
    """
    path = log_dir / ACKED_FILE
    try:
        doc = json.loads(path.read_bytes())
        offsets = checked_offsets(doc)
        acked_at = float(doc["acked_at"])
    except FileNotFoundError:
        return {}, None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        logger.error("%s is corrupt (%s); ignored", path, exc)
        return {}, None
    return offsets, acked_at
