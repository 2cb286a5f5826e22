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
from aqueduct.bridge.storage.commits import commit_file, read_committed
from aqueduct.bridge.storage.consumers import (
    StreamSelection,
    check_not_dropped,
    load_consumers,
    register_consumer,
)
from aqueduct.bridge.storage.corruption import corrupt_handler, corrupt_ranges, records_passed
from aqueduct.bridge.storage.index import write_atomically
from aqueduct.bridge.storage.offset import SourceOffset
from aqueduct.bridge.storage.segment import read_batches
from aqueduct.bridge.storage.view import LogSnapshots, StreamIndex, load_stream

logger = logging.getLogger(__name__)


class Snapshots(Protocol):
    """:class:`~aqueduct.bridge.storage.view.LogSnapshots`' contract: streams by id, cheap to ask again."""

    #: the streams the last :meth:`load` reloaded; None when any may have changed
    changed: set[int] | None

    def load(self) -> dict[int, StreamIndex]: ...


class LogAccess(Protocol):
    """One log as the source sees it; picklable (executors get it inside the reader)."""

    def snapshots(self, skip_corrupt: bool = False) -> Snapshots:
        """A fresh, caching view of the streams (planning keeps one per reader).

        Its epoch questions meet a corrupt batch as :meth:`read` does
        (``skip_corrupt``: see :attr:`~aqueduct.bridge.storage.view.StreamIndex.skip_corrupt`).
        """
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
        """Record that ``consumer`` committed ``positions``; ``skipped`` records were skipped since last time.

        ``skipped`` counts what the reader skipped as truncated; the log adds
        the records of corrupt batches the commit moves past.
        """
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

    def snapshots(self, skip_corrupt: bool = False) -> LogSnapshots:
        return LogSnapshots(self.path, skip_corrupt)

    def read(self, piece: Slice, skip_corrupt: bool = False) -> Iterator[pa.RecordBatch]:
        on_corrupt = corrupt_handler(skip_corrupt)
        return read_batches(Path(piece.directory), piece.entries, piece.start, piece.end, on_corrupt)

    def register(self, consumer: str, start: Mapping[int, int], reads: StreamSelection) -> None:
        register_consumer(self.path, consumer, start, reads=reads)

    def check_not_dropped(self, consumer: str) -> None:
        check_not_dropped(self.path, consumer)

    def commit(self, consumer: str, positions: Mapping[int, int], skipped: int) -> None:
        """Write ``<log>/commits/<consumer>.json``: the safety-net signal the bridge polls.

        The document also counts the records ``failOnDataLoss=false``
        skipped over the consumer's life, for ``aqueduct-bridge consumers list``:
        truncated ones (``skipped``, counted by the reader) and those of
        corrupt batches (:meth:`_corrupt_passed`). This runs in the bridge for
        a query reading it over Flight, so both ways count alike.
        """
        path = commit_file(self.path, consumer)
        total = skipped + _skipped_before(path) + self._corrupt_passed(consumer, positions)
        offsets = SourceOffset(positions).spark()
        doc = {"offsets": offsets, "crc32c": offsets_checksum(offsets), "committed_at": time.time(),
               "skipped_records": total}  # fmt: skip
        try:
            path.parent.mkdir(exist_ok=True)
            write_atomically(path, json.dumps(doc).encode())
        except OSError as e:  # a full log disk: the listener still signals, the next commit rewrites it
            logger.warning("aqueduct source: cannot write %s (%s); the next commit writes it", path, e)

    def _corrupt_passed(self, consumer: str, positions: Mapping[int, int]) -> int:
        """Records of batches in ``corrupt/`` that this commit moves past: the consumer skipped them.

        Whoever read them recorded them first (an executor, a planning
        lookup, a bridge serving either), and a read that does not skip
        never commits past one. From the consumer's last commit (else where
        it registered), and never below a stream's earliest record: records
        truncated before the consumer read them are counted as truncated.
        """
        ranges = [r for r in corrupt_ranges(self.path) if r[0] in positions]
        if not ranges:
            return 0
        since = read_committed(self.path, consumer)
        if since is None:
            registered = load_consumers(self.path).get(consumer)
            since = dict(registered.start) if registered is not None else {}
        ahead = [(sid, a, b) for sid, a, b in ranges if b > since.get(sid, 0) and a < positions[sid]]
        for sid in {sid for sid, _, _ in ahead}:  # rare: an index is read only when a commit passes one
            stream = load_stream(self.path, sid)
            since[sid] = max(since.get(sid, 0), stream.earliest if stream is not None else positions[sid])
        return records_passed(ahead, since, positions)


def _skipped_before(path: Path) -> int:
    try:
        return int(json.loads(path.read_bytes()).get("skipped_records", 0))
    except (FileNotFoundError, ValueError, AttributeError):
        return 0
