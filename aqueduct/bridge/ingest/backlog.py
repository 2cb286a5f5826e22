"""Per stream, how far records are complete and how far the sink committed them.

The **backlog** (records in complete epochs that Spark has not committed,
summed over streams) is what the credit tap looks at: it is moved from
two sides, the group-commit writer (an epoch completed and became durable)
and the acks (the sink committed), and read by the credits. It is kept
current in O(1) per move, never summed per commit. Records of a still-open
epoch do not count: Spark cannot read them until the producer sends the
BOUNDARY, which needs credits, so counting them could deadlock.

Each stream's own part (:meth:`Backlog.lag_of`) and how many streams have
one (:attr:`Backlog.lagging`) are what the fair share
(:mod:`~aqueduct.bridge.ingest.fair_share`) splits ``max_lag`` by.
"""

from __future__ import annotations


class Backlog:
    """Complete and committed offsets of every stream of the log, and their difference summed."""

    def __init__(self) -> None:
        self._complete: dict[int, int] = {}  # stream -> end of its last complete epoch
        self._committed: dict[int, int] = {}  # stream -> offset Spark committed in its sink
        self._lag = 0  # sum over streams of complete - committed
        self._lagging = 0  # streams whose complete is beyond their committed

    def __contains__(self, sid: int) -> bool:
        """Is ``sid`` a stream of this log (opened, or recovered at start)?"""
        return sid in self._complete

    def move(self, sid: int, *, complete: int | None = None, committed: int | None = None) -> None:
        """Set a stream's complete and/or committed offset, keeping :attr:`lag` current in O(1)."""
        old_complete, old_committed = self._complete.get(sid, 0), self._committed.get(sid, 0)
        new_complete = old_complete if complete is None else complete
        new_committed = old_committed if committed is None else committed
        self._complete[sid], self._committed[sid] = new_complete, new_committed
        old_lag, new_lag = max(0, old_complete - old_committed), max(0, new_complete - new_committed)
        self._lag += new_lag - old_lag
        self._lagging += (new_lag > 0) - (old_lag > 0)

    def lag_of(self, sid: int) -> int:
        """Records of ``sid``'s complete epochs the sink has not committed (0 for a stream not of this log)."""
        return max(0, self._complete.get(sid, 0) - self._committed.get(sid, 0))

    def committed(self, sid: int) -> int:
        """The offset below which the sink committed every record of ``sid`` (0: none)."""
        return self._committed.get(sid, 0)

    def committed_offsets(self) -> dict[int, int]:
        """Per stream, the log offset below which Spark has committed everything."""
        return dict(self._committed)

    def complete_offsets(self) -> dict[int, int]:
        """Per stream, the end of its last complete epoch (what a query may read)."""
        return dict(self._complete)

    @property
    def lag(self) -> int:
        """Records in complete epochs that Spark has not committed yet."""
        return self._lag

    @property
    def lagging(self) -> int:
        """How many streams have records in complete epochs that Spark has not committed."""
        return self._lagging
