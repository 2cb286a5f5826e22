"""From "Spark committed a micro-batch" to "ACK the producers and trim the log".

A record may be acknowledged to its producer only once the Spark
micro-batch holding it is committed in the sink. Two signals say so:

- **Prompt**: :class:`CommitListener`, a ``StreamingQueryListener`` in the
  driver. Spark posts query progress after it wrote the batch's commit
  log entry (the sink had committed before that), so the ``endOffset`` of
  the ``aqueduct`` source in a progress event is committed.
- **Safety net**: the source's ``commit(end)`` writes the offsets to
  ``<log>/commits/<consumer>.json`` (it runs one batch late, in a worker
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
    """Calls ``on_committed(positions)`` each time an ``aqueduct`` query commits further.

    Runs in the driver, on Spark's listener thread (py4j callback): the
    callback must hand the positions to the bridge's own loop (e.g.
    ``loop.call_soon_threadsafe``) rather than touch the log directly.
    ``query_name`` restricts it to one query; positions only move forward.
    """

    def __init__(
        self,
        on_committed: Callable[[dict[int, int]], None],
        *,
        query_name: str | None = None,
    ) -> None:
        self.on_committed = on_committed
        self.query_name = query_name
        self._last: dict[int, int] = {}
        self._lock = threading.Lock()

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = event.progress
        if self.query_name is not None and progress.name != self.query_name:
            return
        for source in progress.sources:
            if SOURCE_DESCRIPTION_MARK not in source.description or not source.endOffset:
                continue
            try:
                positions = parse_offsets(source.endOffset)
            except ValueError:
                continue
            with self._lock:
                advanced = {
                    sid: pos for sid, pos in positions.items() if pos > self._last.get(sid, -1)
                }
                self._last.update(advanced)
            if advanced:
                self.on_committed(positions)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        pass


def install_commit_listener(
    spark: Any, on_committed: Callable[[dict[int, int]], None], *, query_name: str | None = None
) -> CommitListener:
    """Register a :class:`CommitListener` on ``spark.streams`` and return it."""
    listener = CommitListener(on_committed, query_name=query_name)
    spark.streams.addListener(listener)
    return listener
