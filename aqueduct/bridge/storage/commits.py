"""Committed offsets: the file each consumer's source writes, and the ACK points they allow.

A record may be acknowledged to its producer only once the Spark
micro-batch holding it is committed in the sink. Two signals say so: the
prompt one is the application room's listener
(:mod:`aqueduct.bridge.app.commit_listener`); the safety net is this file.
The source's ``commit(end)`` writes the offsets to
``<log>/commits/<consumer>.json`` (it runs one batch late, in a worker the
JVM spawned), and :func:`read_committed` reads them back, e.g. after a
bridge restart when no listener saw the last batches.

Either signal yields a :class:`~aqueduct.bridge.storage.offset.SourceOffset`,
read as positions ``{stream id: log offset}``; :func:`acks_for`
turns them into points of reference for ACK frames, and the log may then be
truncated below them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from aqueduct.bridge.storage.acked import checked_offsets

COMMITS_DIR = "commits"

logger = logging.getLogger(__name__)


def commit_file(log: Path, consumer: str) -> Path:
    """Where the source records the offsets a consumer (query) committed."""
    return log / COMMITS_DIR / f"{consumer}.json"


def read_committed(log: str | Path, consumer: str = "default") -> dict[int, int] | None:
    """Positions last committed by the source for ``consumer``, or None if never.

    A file whose bytes changed (not JSON, or offsets failing the checksum
    written with them) is reported and read as None: acks and truncation
    then follow the listener's signal until the next commit rewrites it,
    rather than offsets nobody committed.
    """
    path = commit_file(Path(log), consumer)
    try:
        doc = json.loads(path.read_bytes())
        positions = checked_offsets(doc)
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        logger.error("commit file %s is corrupt (%s); ignored until the next commit rewrites it", path, exc)
        return None
    return positions


class PositionLog(Protocol):
    """What :func:`acks_for` needs from the log (``DurableLog`` provides it)."""

    def reference_at(self, stream_id: int, offset: int) -> int: ...


def acks_for(log: PositionLog, positions: Mapping[int, int]) -> dict[int, int]:
    """Point of reference per stream covering every record below its committed position."""
    return {sid: log.reference_at(sid, pos) for sid, pos in sorted(positions.items())}
