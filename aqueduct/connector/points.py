"""Points of reference and deduplication of one stream: the spec's rule, in one place.

spec/connector-wire.md section 2: a point of reference ``P`` is an
exclusive upper bound, every message of the stream with a stable reference
and an id below ``P`` is included; after a resume the worker drops messages
whose id is below the point or already received; UNSTABLE_REFERENCE and
EPHEMERAL messages never move a point. Received ids are a
:class:`~aqueduct.wire.rangeset.RangeSet` (a contiguous base plus the ids
above it: the bigset "version vector + dot cloud"), so the state stays
small as gaps fill.

How the point moves depends on the stream's :class:`Mode`:

* **ORDERED** (and every TCP stream): ids strictly increase, and may skip
  (compacted Kafka offsets, say). An id ``m`` proves no id below it is still
  coming, so the point becomes ``m + 1``.
* **UNORDERED** / UNRELIABLE: ids are consecutive but may arrive in any
  order, so the point is the first id not yet received.

Three places apply it, and all through :class:`StreamPoints`: the worker
session (per connection, seeded from what the log holds, so it drops a
resume's duplicates early), the durable log (per stream, the truth across
sessions and restarts) and the Wallaroo v3 session (whose inclusive points
are converted at its edge). Only stable ids are tracked: a message without
a stable reference is neither deduplicated nor moves the point, exactly as
the wire cannot tell whether its id will ever be stable.
"""

from __future__ import annotations

from aqueduct.wire.modes import Mode
from aqueduct.wire.rangeset import RangeSet


class StreamPoints:
    """The received stable ids of one stream and its point of reference."""

    __slots__ = ("received", "point", "ordered")

    def __init__(
        self, mode: Mode = Mode.ORDERED, received: RangeSet | None = None, point: int = 0
    ) -> None:
        self.received = RangeSet() if received is None else received
        self.point = point
        self.ordered = mode is Mode.ORDERED

    def set_mode(self, mode: Mode) -> None:
        """The stream was (re-)notified with this mode: how its point moves from now on."""
        self.ordered = mode is Mode.ORDERED

    def start_from(self, point: int) -> int:
        """Ids below ``point`` never come (again): a NOTIFY's point, or a durable one. Returns the point."""
        if point > self.point:
            self.point = point
        if not self.ordered:
            self.point = self.received.min_missing_from(self.point)
        return self.point

    def holds(self, message_id: int) -> bool:
        """True if a stable message with this id was already received (a duplicate to drop)."""
        return message_id < self.point or message_id in self.received

    def receive(self, message_id: int) -> bool:
        """Record a stable id; False if it is a duplicate (and nothing changed).

        ``insert`` is the membership test and the add in one, O(1) for the
        next id: this runs once per record on both the session and the log.
        An ORDERED stream's skipped ids are filled in (they never come), so
        its received set stays one range however its ids skip.
        """
        if message_id < self.point or not self.received.insert(message_id):
            return False
        if self.ordered:
            if message_id != self.point:
                self.received.add_range(0, message_id + 1)
            self.point = message_id + 1
        else:
            self.point = self.received.min_missing_from(self.point)
        return True

    def receive_run(self, start: int, stop: int) -> bool:
        """Record the stable ids ``start .. stop - 1`` at once, if none of them is held yet.

        The common case of a busy stream: a run of consecutive new ids,
        which leaves exactly the state :meth:`receive` of each would, in one
        step. Returns False, changing nothing, when some id of the run may
        be held (below the point, or not above every received id): the
        caller then takes the ids one by one, which sorts out the duplicates.
        """
        if start < self.point or start < self.received.top or stop <= start:
            return False
        if self.ordered:  # as receive() each: skipped ids below fill in, unless the run starts at the point
            self.received.add_range(start if start == self.point else 0, stop)
            self.point = stop
        else:
            self.received.add_range(start, stop)
            if start == self.point:
                self.point = stop
        return True
