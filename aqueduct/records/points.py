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

from collections.abc import Sequence

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

    def receive(self, ids: Sequence[int | None], references: list[int] | None = None) -> list[bool] | None:
        """Record a batch's ids in order; the accepted mask, or None when every record was new.

        ``ids`` are one stream's records in order, None for a record without
        a stable reference (accepted, neither deduplicated nor moving the
        point). A duplicate is dropped (False in the mask) and changes
        nothing. A single record is the batch of one.

        A ``range`` of new ids (a busy stream's run, above everything held:
        not below the point nor any received id) is taken in one step,
        leaving exactly the state taking each would; anything else goes id
        by id (:meth:`_receive_one`), which sorts out the duplicates.
        ``references``, if given, gets the point after each accepted record
        appended (the log stores it with the record).
        """
        if type(ids) is range:  # a run: in one step if every id is new (the busy path)
            start, stop, before = ids.start, ids.stop, self.point
            if start >= before and start >= self.received.top and stop > start and ids.step == 1:
                if self.ordered:  # as each one: skipped ids below fill in, unless the run starts at the point
                    self.received.add_range(start if start == before else 0, stop)
                    self.point = stop
                else:
                    self.received.add_range(start, stop)
                    if start == before:
                        self.point = stop
                if references is not None:  # the point follows the ids unless a gap below the run holds it
                    references.extend(range(start + 1, stop + 1) if self.point == stop else [before] * (stop - start))
                return None
        mask: list[bool] | None = None
        receive_one = self._receive_one
        for row, message_id in enumerate(ids):  # bounded by the batch; a run that may hold a duplicate too
            if message_id is None or receive_one(message_id):
                if references is not None:
                    references.append(self.point)
            else:
                if mask is None:
                    mask = [True] * len(ids)
                mask[row] = False
        return mask

    def _receive_one(self, message_id: int) -> bool:
        """Record one stable id; False if it is a duplicate (and nothing changed).

        ``insert`` is the membership test and the add in one, O(1) for the
        next id. An ORDERED stream's skipped ids are filled in (they never
        come), so its received set stays one range however its ids skip.
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
