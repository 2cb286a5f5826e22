"""``LOG/corrupt/``: the batches whose checksum failed, as whoever read them found them.

A corrupt batch is found by a reader (a Spark worker, the bridge opening
its log), in whichever process reads it. Each finding becomes an empty
file named ``<stream id>.<first offset>-<end offset>``: creating it again
is harmless (a re-run micro-batch finds the same batch), no process needs
to talk to another, and ``aqueduct-bridge status`` counts them. Recording
is best effort: a reader without write access still reports the
corruption in its error or log line, it only goes uncounted.
"""

from __future__ import annotations

import os
from pathlib import Path

from aqueduct.bridge.storage.segment import BatchCorrupt

CORRUPT_DIR = "corrupt"


def record_corrupt(found: BatchCorrupt) -> None:
    """Note a corrupt batch in its log's register (idempotent, best effort)."""
    log = found.directory.parent.parent
    first, end = found.records
    try:
        (log / CORRUPT_DIR).mkdir(exist_ok=True)
        os.close(os.open(log / CORRUPT_DIR / f"{found.directory.name}.{first}-{end}", os.O_CREAT | os.O_WRONLY, 0o644))
    except OSError:
        pass


def corrupt_ranges(log: Path) -> list[tuple[int, int, int]]:
    """``(stream id, first offset, end offset)`` of every batch recorded corrupt, sorted."""
    try:
        names = os.listdir(log / CORRUPT_DIR)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        sid, _, span = name.partition(".")
        first, _, end = span.partition("-")
        if sid.isdigit() and first.isdigit() and end.isdigit():
            found.append((int(sid), int(first), int(end)))
    return sorted(found)
