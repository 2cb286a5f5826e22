"""How far each consumer got, and what that means for acks and truncation.

:class:`ConsumerPositions` is the bridge's side of
:mod:`aqueduct.bridge.storage.consumers`: it gathers every consumer's committed
positions from the two signals of :mod:`aqueduct.bridge.storage.commits` (the
listener for queries in this driver, the commit files for all), re-reads
the registry (a consumer may register from another Spark application, or
be dropped by ``aqueduct-bridge consumers drop``), and hands the ingest's
acks room (:mod:`aqueduct.bridge.ingest.acks`, the one way back to
producers) the ack frontier and the truncation frontier. It runs on the bridge's
event loop; the files it reads and writes are a few small JSON documents.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from aqueduct.bridge.ingest.service import Ingest
from aqueduct.bridge.storage.commits import read_committed
from aqueduct.bridge.storage.consumers import (
    ALL_STREAMS,
    Consumer,
    StreamSelection,
    drop_consumer,
    frontiers,
    lagging,
    load_consumers,
    register_consumer,
)

logger = logging.getLogger(__name__)


class ConsumerPositions:
    """Committed positions per consumer; applies the frontiers to the ingest's acks."""

    def __init__(self, log_dir: Path, ingest: Ingest, max_consumer_lag: int | None = None) -> None:
        self.log_dir = log_dir
        self.ingest = ingest
        self.max_consumer_lag = max_consumer_lag
        self.consumers: dict[str, Consumer] = load_consumers(log_dir)
        self.committed: dict[str, dict[int, int]] = {}

    def register(
        self, name: str, *, acks: bool, latest: bool = False, reads: StreamSelection = ALL_STREAMS
    ) -> Consumer:
        """Register a consumer of this driver, starting at the earliest record or the latest epoch end.

        A consumer starting at the earliest record pins everything the log
        still holds; one starting at the latest complete epoch pins only
        what comes after it.
        """
        start = self.ingest.complete_offsets() if latest else {}
        consumer = register_consumer(self.log_dir, name, start, acks=acks, reads=reads)
        self.consumers[name] = consumer
        return consumer

    def on_committed(self, consumer: str, positions: Mapping[int, int]) -> None:
        """``consumer``'s query committed every record below ``positions`` (listener signal)."""
        self._merge(consumer, positions)
        self.apply()

    def on_sink_committed(self, consumer: str, positions: Mapping[int, int]) -> None:
        """``consumer``'s sink holds every record below ``positions``; its query has yet to record it.

        Acks only. Truncation waits for :meth:`on_committed` (the query's
        own commit log): a query that stops in between runs the batch again
        on restart (its sink skips writing it twice), and so reads it again.
        """
        committed = {**self.committed, consumer: dict(self.committed.get(consumer, {}))}
        mine = committed[consumer]
        for sid, pos in positions.items():
            mine[sid] = max(pos, mine.get(sid, 0))
        acks = frontiers(self.consumers, committed, self.ingest.log.stream_names()).acks
        if acks:
            self.ingest.acks.on_committed(acks)

    def poll(self) -> None:
        """Re-read the registry and every consumer's commit file, then apply (the safety net)."""
        self.consumers = load_consumers(self.log_dir)
        for name in self.consumers:
            positions = read_committed(self.log_dir, name)
            if positions:
                self._merge(name, positions)
        self.apply()

    def _merge(self, consumer: str, positions: Mapping[int, int]) -> None:
        mine = self.committed.setdefault(consumer, {})
        for sid, pos in positions.items():
            if pos > mine.get(sid, 0):
                mine[sid] = pos

    def apply(self) -> None:
        """Ack what every ack consumer committed; truncate below what every consumer needs."""
        if self.max_consumer_lag is not None:
            self._drop_lagging(self.max_consumer_lag)
        f = frontiers(self.consumers, self.committed, self.ingest.log.stream_names())
        if f.acks:
            self.ingest.acks.on_committed(f.acks)
        if f.truncate:
            self.ingest.acks.truncate_below(f.truncate)

    def _drop_lagging(self, max_lag: int) -> None:
        complete = self.ingest.complete_offsets()
        names = self.ingest.log.stream_names()
        for name, lag in lagging(self.consumers, self.committed, complete, max_lag, names).items():
            reason = f"{lag:,} records behind, more than max_consumer_lag {max_lag:,}"
            logger.warning("dropping consumer %r: %s", name, reason)
            self.consumers[name] = drop_consumer(self.log_dir, name, reason)
