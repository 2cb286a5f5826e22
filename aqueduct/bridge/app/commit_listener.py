"""From "Spark committed a micro-batch" to the bridge, promptly: :class:`CommitListener`.

A ``StreamingQueryListener`` in the driver. Spark posts query progress after
it wrote the batch's commit log entry (the sink had committed before that),
so the ``endOffset`` of the ``aqueduct`` source in a progress event is
committed. The safety net for what no listener saw (a restart) is the
commit file, :mod:`aqueduct.bridge.storage.commits`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from aqueduct.bridge.storage.offset import SourceOffset

#: How Spark 4.3 describes any Python data source in query progress; it does not
#: name the source, so offsets that do not parse as ours are skipped too.
SOURCE_DESCRIPTION_MARK = "PythonMicroBatchStream"


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
                positions = SourceOffset.parse(source.endOffset).stream_ids()
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
