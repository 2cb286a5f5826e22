"""How the ``aqueduct`` source reaches one log: its files, or a bridge over the network.

The source's planning (offsets, admission, partitions) is the same for
every log; only five things depend on where the log is, and
:class:`LogAccess` names them: snapshots of the streams' indexes, the
records of a planned :class:`~aqueduct.bridge.source.planning.Slice`, and the
consumer registry's three calls (register, "was I dropped?", commit).
:class:`LocalLog` does them on the directory (the embedded default, and
what a bridge's Flight server runs for its remote readers);
:class:`~aqueduct.bridge.source.flight_client.RemoteLog` asks a bridge's Flight
server to (:mod:`aqueduct.bridge.network.flight_server`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from aqueduct.bridge.source.planning import Slice
from aqueduct.bridge.storage.acked import offsets_checksum
from aqueduct.bridge.storage.commits import commit_file
from aqueduct.bridge.storage.consumers import StreamSelection, check_not_dropped, register_consumer
from aqueduct.bridge.storage.corruption import record_corrupt
from aqueduct.bridge.storage.index import write_atomically
from aqueduct.bridge.storage.offset import SourceOffset
from aqueduct.bridge.storage.segment import BatchCorrupt, read_batches
from aqueduct.bridge.storage.view import LogSnapshots, StreamIndex

logger = logging.getLogger(__name__)


class Snapshots(Protocol):
    """:class:`~aqueduct.bridge.storage.view.LogSnapshots`' contract: streams by id, cheap to ask again."""

    #: the streams the last :meth:`load` reloaded; None when any may have changed
    changed: set[int] | None

    def load(self) -> dict[int, StreamIndex]: ...


class LogAccess(Protocol):
    """One log as the source sees it; picklable (executors get it inside the reader)."""

    def snapshots(self) -> Snapshots:
        """A fresh, caching view of the streams (planning keeps one per reader)."""
        ...

    def read(self, piece: Slice, skip_corrupt: bool = False) -> Iterator[pa.RecordBatch]:
        """Stored-schema batches of ``piece``'s records (executors call this).

        A batch failing its checksum is recorded in the log's ``corrupt/``
        register and raises (:class:`~aqueduct.bridge.storage.segment.BatchCorrupt`
        here, ``RemoteCorruption`` from a bridge), or with ``skip_corrupt``
        is left out with a warning; changed bytes are never returned.
        """
        ...

    def register(self, consumer: str, start: Mapping[int, int], reads: StreamSelection) -> None:
        """Register ``consumer`` at ``start`` unless it is live (see ``register_consumer``)."""
        ...

    def check_not_dropped(self, consumer: str) -> None:
        """Raise ``ConsumerError`` if the bridge dropped ``consumer``."""
        ...

    def commit(self, consumer: str, positions: Mapping[int, int], skipped: int) -> None:
        """Record that ``consumer`` committed ``positions``; ``skipped`` records were skipped since last time."""
        ...


def stream_id(piece: Slice) -> int:
    """The log's own id of a slice's stream (its key carries the log's name in a query over several)."""
    return piece.key[1] if isinstance(piece.key, tuple) else piece.key


class LocalLog:
    """A log directory this process can read: memory-mapped segments, registry files."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"LocalLog({str(self.path)!r})"

    def snapshots(self) -> LogSnapshots:
        return LogSnapshots(self.path)

    def read(self, piece: Slice, skip_corrupt: bool = False) -> Iterator[pa.RecordBatch]:
        on_corrupt = skip_recorded if skip_corrupt else raise_recorded
        return read_batches(Path(piece.directory), piece.entries, piece.start, piece.end, on_corrupt)

    def register(self, consumer: str, start: Mapping[int, int], reads: StreamSelection) -> None:
        register_consumer(self.path, consumer, start, reads=reads)

    def check_not_dropped(self, consumer: str) -> None:
        check_not_dropped(self.path, consumer)

    def commit(self, consumer: str, positions: Mapping[int, int], skipped: int) -> None:
        """Write ``<log>/commits/<consumer>.json``: the safety-net signal the bridge polls.

        The document also counts the records ``failOnDataLoss=false``
        skipped over the consumer's life, for ``aqueduct-bridge consumers list``.
        """
        path = commit_file(self.path, consumer)
        total = skipped + _skipped_before(path)
        offsets = SourceOffset(positions).spark()
        doc = {"offsets": offsets, "crc32c": offsets_checksum(offsets), "committed_at": time.time(),
               "skipped_records": total}  # fmt: skip
        try:
            path.parent.mkdir(exist_ok=True)
            write_atomically(path, json.dumps(doc).encode())
        except OSError as e:  # a full log disk: the listener still signals, the next commit rewrites it
            logger.warning("aqueduct source: cannot write %s (%s); the next commit writes it", path, e)


def raise_recorded(found: BatchCorrupt) -> None:
    """A corrupt batch read without ``failOnDataLoss=false``: recorded, then raised."""
    record_corrupt(found)
    raise found


def skip_recorded(found: BatchCorrupt) -> None:
    """A corrupt batch under ``failOnDataLoss=false``: recorded and left out."""
    record_corrupt(found)
    logger.warning("aqueduct source: skipping %s (failOnDataLoss=false)", found)


def _skipped_before(path: Path) -> int:
    try:
        return int(json.loads(path.read_bytes()).get("skipped_records", 0))
    except (FileNotFoundError, ValueError, AttributeError):
        return 0
