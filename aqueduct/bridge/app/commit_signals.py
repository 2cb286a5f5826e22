"""The three signals that a query committed a micro-batch, turned into acks and truncation.

A batch committed by a consumer's query is heard of up to three times,
from the earliest to the surest:

1. the file sink's own log (the bridge's ``parquet`` sink): the records
   are in the sink, the query has yet to record it. Acks, no truncation
   (:meth:`CommitSignals.on_sink_commit`);
2. Spark's commit log in the query's checkpoint, polled on the loop
   (:meth:`CommitSignals.follow_commit_log`), or, for queries whose
   checkpoint the bridge does not read, a ``StreamingQueryListener`` in
   this driver that hops onto the loop (:meth:`CommitSignals.on_spark_commit`);
   for a query reading the log over Flight (an ingest-only bridge's, a
   cluster's), its ``commit`` call, which hops onto the loop from the
   Flight server's thread (:meth:`CommitSignals.flight_commits`);
3. each consumer's commit file, polled as a safety net
   (:meth:`CommitSignals.safety_net`): it covers batches committed while
   no listener was watching (before a restart, or in another Spark
   application) and lost callbacks.

Each goes to :class:`~aqueduct.bridge.ingest.positions.ConsumerPositions`,
which has the ingest ACK producers (once every ack consumer committed)
and truncate the log (below what every registered consumer needs); a
batch is counted once, by whichever signal came first. Everything here
runs on the bridge's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from aqueduct.bridge.app.commit_log import CheckpointCommits
from aqueduct.bridge.ingest.positions import ConsumerPositions
from aqueduct.bridge.storage.consumers import DEFAULT_CONSUMER

SAFETY_NET_INTERVAL = 2.0  # seconds between reads of the consumers' commit files
COMMIT_LOG_POLL = 0.005  # seconds between looks at Spark's commit log while records wait for a commit
COMMIT_LOG_IDLE = 0.05  # seconds between looks at whether records wait at all


class CommitSignals:
    """Where the commit signals of a bridge's consumers arrive; counts the batches they committed.

    Made with the bridge, before its positions exist (a
    :class:`~aqueduct.bridge.app.spark_bridge.SparkBridge` listens to Spark
    before the log opens); signals before :meth:`open` and after
    :meth:`close` are ignored.
    """

    def __init__(self) -> None:
        self.positions: ConsumerPositions | None = None
        self._closed = False  # the log closed: a late listener callback has nothing to ack
        self.batches = 0  # micro-batches whose commit advanced the offsets
        self._counted: dict[str, dict[int, int]] = {}  # per consumer, the end of the last batch counted

    def open(self, positions: ConsumerPositions) -> None:
        """The log and its consumers' positions are there: signals take effect from now on."""
        self.positions = positions

    def close(self) -> None:
        """The log closed: listener callbacks still on their way are dropped."""
        self._closed = True

    def _count_batch(self, consumer: str, positions: dict[int, int]) -> None:
        """Count a committed batch once, by whichever signal (sink log, commit log, listener) came first."""
        assert self.positions is not None
        known = self._counted.setdefault(consumer, dict(self.positions.committed.get(consumer, {})))
        if any(pos > known.get(sid, 0) for sid, pos in positions.items()):
            self.batches += 1
            known.update((sid, max(pos, known.get(sid, 0))) for sid, pos in positions.items())

    def on_spark_commit(self, consumer: str, positions: dict[int, int]) -> None:
        """``consumer``'s query recorded a batch (its commit log, or the listener): acks and truncation."""
        if self.positions is not None and not self._closed:
            self._count_batch(consumer, positions)
            # Acks, trims the log and records the acked offsets for `status`
            # (the reader's commit file trails by a trigger; acked.json does not).
            self.positions.on_committed(consumer, positions)

    def on_sink_commit(self, consumer: str, positions: dict[int, int]) -> None:
        """The file sink committed a batch its query has yet to record: acks, no truncation."""
        if self.positions is not None:
            self._count_batch(consumer, positions)
            self.positions.on_sink_committed(consumer, positions)

    def flight_commits(self, loop: asyncio.AbstractEventLoop) -> Callable[[str, dict[int, int]], None]:
        """The Flight server's ``on_commit``: a query reading over Flight committed, its commit file written.

        Called on a Flight thread; acks and truncation follow on ``loop`` at
        once, as the commit file's safety net would at its next read, up to
        :data:`SAFETY_NET_INTERVAL` later: a failover query's producers
        would wait that long for every ACK.
        """

        def heard(consumer: str, positions: dict[int, int]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: the bridge stopped, the file stays
                loop.call_soon_threadsafe(self.on_spark_commit, consumer, positions)

        return heard

    async def follow_commit_log(self, commits: CheckpointCommits) -> None:
        """Ack the moment a batch committed: from the file sink's log, else Spark's commit log.

        Looks every :data:`COMMIT_LOG_POLL` seconds while records wait for
        a commit or a batch acked from the sink's log waits for the commit
        log (one to three ``stat`` calls), not at all while nothing does.
        Such a query has no listener (see :class:`~aqueduct.bridge.app.spark_query.SparkQuery`);
        the commit files' safety net still runs.
        """
        assert self.positions is not None
        ingest = self.positions.ingest
        while True:
            waiting = ingest.lag > 0 or commits.trailing
            await asyncio.sleep(COMMIT_LOG_POLL if waiting else COMMIT_LOG_IDLE)
            if not waiting:
                continue
            if positions := commits.poll():
                self.on_spark_commit(DEFAULT_CONSUMER, positions)
            elif positions := commits.poll_sink():
                self.on_sink_commit(DEFAULT_CONSUMER, positions)

    async def safety_net(self) -> None:
        """Re-read the consumers' commit files every :data:`SAFETY_NET_INTERVAL` seconds."""
        while True:
            await asyncio.sleep(SAFETY_NET_INTERVAL)
            assert self.positions is not None
            self.positions.poll()
