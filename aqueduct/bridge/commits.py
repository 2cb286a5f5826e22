"""From "Spark committed a micro-batch" to "ACK the producers and trim the log".

A record may be acknowledged to its producer only once the Spark
micro-batch holding it is committed in the sink. Two signals say so:

- **Prompt**: :class:`CommitListener`, a ``StreamingQueryListener`` in the
  driver. Spark posts query progress after it wrote the batch's commit
  log entry (the sink had committed before that), so the ``endOffset`` of
  the ``aqueduct`` source in a progress event is committed.
- **Safety net**: the source writes each committed batch's end offsets to
  ``<log>/commits/<consumer>.json`` (at the next trigger, in a worker
  the JVM spawned). :func:`read_committed` reads them back, e.g. after a
  bridge restart when no listener saw the last batches.

Either signal yields positions ``{stream id: log offset}``;
:func:`acks_for` turns them into points of reference for ACK frames, and
the log may then be truncated below them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

COMMITS_DIR = "commits"

#: How Spark 4.3 describes any Python data source in query progress; it does not
#: name the source, so offsets that do not parse as ours are skipped too.
SOURCE_DESCRIPTION_MARK = "PythonMicroBatchStream"


def parse_offsets(offsets: Mapping[str, Any] | str) -> dict[int, int]:
    """``{"<stream id>": position}`` (dict or JSON text) to ``{stream id: position}``."""
    if isinstance(offsets, str):
        offsets = json.loads(offsets)
    if not isinstance(offsets, Mapping):
        raise ValueError(f"aqueduct offset: expected a JSON object, got {offsets!r}")
    positions: dict[int, int] = {}
    for k, v in offsets.items():
        if not (isinstance(k, str) and k.isdigit()) or not isinstance(v, int) or v < 0:
            raise ValueError(
                f'aqueduct offset: entries must be "<stream id>": <non-negative int>, got {k!r}: {v!r}'
            )
        positions[int(k)] = v
    return positions


def commit_file(log: Path, consumer: str) -> Path:
    """Where the source records the offsets a consumer (query) committed."""
    return log / COMMITS_DIR / f"{consumer}.json"


def read_committed(log: str | Path, consumer: str = "default") -> dict[int, int] | None:
    """Positions last committed by the source for ``consumer``, or None if never."""
    try:
        doc = json.loads(commit_file(Path(log), consumer).read_bytes())
    except FileNotFoundError:
        return None
    return parse_offsets(doc["offsets"])


class PositionLog(Protocol):
    """What :func:`acks_for` needs from the log (``DurableLog`` provides it)."""

    def reference_at(self, stream_id: int, offset: int) -> int: ...


def acks_for(log: PositionLog, positions: Mapping[int, int]) -> dict[int, int]:
    """Point of reference per stream covering every record below its committed position."""
    return {sid: log.reference_at(sid, pos) for sid, pos in sorted(positions.items())}


class CommitListener(StreamingQueryListener):
    """Calls ``on_committed(consumer, positions)`` when a watched query commits further.

    Runs in the driver, on Spark's listener thread (py4j callback): the
    callback must hand the positions to the bridge's own loop (e.g.
    ``loop.call_soon_threadsafe``) rather than touch the log directly.
    Only queries passed to :meth:`watch` (by id, or by name before they
    start) count, each as the consumer it reads the log as; positions only
    move forward.
    """

    def __init__(self, on_committed: Callable[[str, dict[int, int]], None]) -> None:
        self.on_committed = on_committed
        self._consumers: dict[str, str] = {}  # query id or name -> consumer name
        self._last: dict[str, dict[int, int]] = {}  # query id or name -> last positions
        self._lock = threading.Lock()

    def watch(self, query: str, consumer: str) -> None:
        """Report the commits of the query with this id or name as ``consumer``'s."""
        with self._lock:
            self._consumers[query] = consumer
            self._last.setdefault(query, {})

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = event.progress
        with self._lock:
            key = str(progress.id) if str(progress.id) in self._consumers else progress.name
            consumer = self._consumers.get(key)
        if consumer is None:
            return
        for source in progress.sources:
            if SOURCE_DESCRIPTION_MARK not in source.description or not source.endOffset:
                continue
            try:
                positions = parse_offsets(source.endOffset)
            except ValueError:
                continue
            with self._lock:
                last = self._last[key]
                advanced = {sid: pos for sid, pos in positions.items() if pos > last.get(sid, -1)}
                last.update(advanced)
            if advanced:
                self.on_committed(consumer, positions)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        with self._lock:
            self._consumers.pop(str(event.id), None)
            self._last.pop(str(event.id), None)


def install_commit_listener(
    spark: Any, on_committed: Callable[[str, dict[int, int]], None]
) -> CommitListener:
    """Register a :class:`CommitListener` on ``spark.streams`` and return it."""
    listener = CommitListener(on_committed)
    spark.streams.addListener(listener)
    return listener
