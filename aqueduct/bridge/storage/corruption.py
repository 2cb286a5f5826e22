"""``LOG/corrupt/``: the batches whose checksum failed, and the one rule for what a reader does then.

A corrupt batch is found by a reader (a Spark worker, the Spark planner
asking an epoch question, a bridge serving either over Flight, the bridge
opening its log), in whichever process reads it. Each finding becomes an
empty file named ``<stream id>.<first offset>-<end offset>``: creating it
again is harmless (a re-run micro-batch finds the same batch), no process
needs to talk to another, and ``aqueduct-bridge status`` counts them.
Recording is best effort: a reader without write access still reports the
corruption in its error or log line, it only goes uncounted.

What follows the finding is :func:`corrupt_handler`, the same for every read
(the source's ``failOnDataLoss``): record it, then raise, or skip the batch
with a warning. The register is also how a skip is counted for its
consumer: a commit that moves past a recorded batch skipped it
(:func:`records_passed`), since a read that does not skip never gets past one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from aqueduct.bridge.storage.segment import BatchCorrupt

CORRUPT_DIR = "corrupt"

logger = logging.getLogger(__name__)


def record_corrupt(found: BatchCorrupt) -> None:
    """Note a corrupt batch in its log's register (idempotent, best effort)."""
    log = found.directory.parent.parent
    first, end = found.records
    try:
        (log / CORRUPT_DIR).mkdir(exist_ok=True)
        os.close(os.open(log / CORRUPT_DIR / f"{found.directory.name}.{first}-{end}", os.O_CREAT | os.O_WRONLY, 0o644))
    except OSError:
        pass


def raise_recorded(found: BatchCorrupt) -> None:
    """A corrupt batch read without ``failOnDataLoss=false``: recorded, then raised."""
    record_corrupt(found)
    raise found


def skip_recorded(found: BatchCorrupt) -> None:
    """A corrupt batch under ``failOnDataLoss=false``: recorded and left out."""
    record_corrupt(found)
    logger.warning("aqueduct source: skipping %s (failOnDataLoss=false)", found)


def corrupt_handler(skip: bool) -> Callable[[BatchCorrupt], None]:
    """What a read does with a batch failing its checksum: the ``on_corrupt`` of ``read_batches``.

    Every read of the source takes it from here, wherever it runs: an
    executor's slice, a planning lookup, a bridge serving either over
    Flight (the ticket carries ``skip``).
    """
    return skip_recorded if skip else raise_recorded


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


def records_passed(
    ranges: list[tuple[int, int, int]], since: Mapping[int, int], until: Mapping[int, int]
) -> int:
    """Records of the recorded-corrupt ``ranges`` that lie between positions ``since`` and ``until``.

    A consumer whose commit moves from ``since`` to ``until`` skipped
    exactly these. ``since`` should be no lower than each stream's earliest
    stored record: what truncation took is counted as truncated, not twice.
    """
    total = 0
    for sid, first, end in ranges:
        if sid in until:
            total += max(0, min(end, until[sid]) - max(first, since.get(sid, 0)))
    return total
