"""``LOG/acked.json``: the offsets whose points of reference the bridge acked.

The reader's commit file trails Spark by one micro-batch; this one is
rewritten (by the log's I/O thread, :meth:`DurableLog.write_acked`) each
time the bridge acks a committed micro-batch, so ``aqueduct-bridge status``
can show how far producers were told their data is safe.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path

from aqueduct.bridge.storage.index import write_atomically

ACKED_FILE = "acked.json"


def write_acked(log_dir: Path, positions: Mapping[int, int]) -> None:
    """Record the offsets whose points of reference the bridge acked (atomically)."""
    doc = {"offsets": {str(s): positions[s] for s in sorted(positions)}, "acked_at": time.time()}
    write_atomically(log_dir / ACKED_FILE, json.dumps(doc).encode())


def read_acked(log_dir: Path) -> dict[int, int]:
    """Offsets recorded by :func:`write_acked` (empty before the first commit)."""
    return read_acked_at(log_dir)[0]


def read_acked_at(log_dir: Path) -> tuple[dict[int, int], float | None]:
    """Offsets recorded by :func:`write_acked` and when (``time.time()``; None before the first commit)."""
    try:
        doc = json.loads((log_dir / ACKED_FILE).read_bytes())
    except FileNotFoundError:
        return {}, None
    return {int(sid): int(offset) for sid, offset in doc["offsets"].items()}, float(doc["acked_at"])
