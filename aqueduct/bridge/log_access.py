"""How the ``aqueduct`` source reaches one log: its files, or a bridge over the network.

The source's planning (offsets, admission, partitions) is the same for
every log; only five things depend on where the log is, and
:class:`LogAccess` names them: snapshots of the streams' indexes, the
records of a planned :class:`~aqueduct.bridge.planning.Slice`, and the
consumer registry's three calls (register, "was I dropped?", commit).
:class:`LocalLog` does them on the directory (the embedded default, and
what a bridge's Flight server runs for its remote readers);
:class:`~aqueduct.bridge.flight_client.RemoteLog` asks a bridge's Flight
server to (:mod:`aqueduct.bridge.flight_server`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from aqueduct.bridge.commits import commit_file
from aqueduct.bridge.consumers import StreamSelection, check_not_dropped, register_consumer
from aqueduct.bridge.index import write_atomically
from aqueduct.bridge.planning import Slice
from aqueduct.bridge.segment import read_batches
from aqueduct.bridge.view import LogSnapshots, StreamIndex


class Snapshots(Protocol):
    """:class:`~aqueduct.bridge.view.LogSnapshots`' contract: streams by id, cheap to ask again."""

    #: the streams the last :meth:`load` reloaded; None when any may have changed
    changed: set[int] | None

    def load(self) -> dict[int, StreamIndex]: ...


class LogAccess(Protocol):
    """One log as the source sees it; picklable (executors get it inside the reader)."""

    def snapshots(self) -> Snapshots:
        """A fresh, caching view of the streams (planning keeps one per reader)."""
        ...

    def read(self, piece: Slice) -> Iterator[pa.RecordBatch]:
        """Stored-schema batches of ``piece``'s records (executors call this)."""
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

    def read(self, piece: Slice) -> Iterator[pa.RecordBatch]:
        return read_batches(Path(piece.directory), piece.entries, piece.start, piece.end)

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
        offsets = {str(sid): positions[sid] for sid in sorted(positions)}
        doc = {"offsets": offsets, "committed_at": time.time(), "skipped_records": total}
        path.parent.mkdir(exist_ok=True)
        write_atomically(path, json.dumps(doc).encode())


def _skipped_before(path: Path) -> int:
    try:
        return int(json.loads(path.read_bytes()).get("skipped_records", 0))
    except (FileNotFoundError, ValueError, AttributeError):
        return 0
