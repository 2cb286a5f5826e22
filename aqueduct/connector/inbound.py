"""Worker-side bookkeeping of one stream: state, deduplication, point of reference.

Deduplication follows spec section 2: received ids are kept in a
:class:`~aqueduct.wire.rangeset.RangeSet` (a contiguous base plus the ids
above it, the bigset "version vector + dot cloud"), seeded with everything
below the durable point of reference. A message whose id is already in the
set is a duplicate from a resume and is dropped.

The point of reference is the exclusive upper bound of what was received:
the set's contiguous base, pulled back over any trailing run of
UNSTABLE_REFERENCE ids (those never move a point). When input arrives in
order (TCP, an ORDERED channel), an id ``m`` also proves no id below ``m`` is
still coming, so the gap below it is filled: ORDERED streams may skip ids
(e.g. compacted Kafka offsets) and their point must still advance. Unordered
input gets no such filling, which is why UNORDERED streams must use
consecutive ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aqueduct.connector.frames import EOS, EPHEMERAL, UNSTABLE_REFERENCE, Record
from aqueduct.connector.states import STREAM_TRANSITIONS, StreamState, step
from aqueduct.wire.rangeset import RangeSet


@dataclass
class DurableStream:
    """What the worker's durable storage already holds for one stream.

    ``received`` may list durable ids above the point (out-of-order arrivals
    made durable before a gap filled); by default it is ``[0, point)``.
    """

    stream_id: int
    stream_name: str
    point_of_reference: int
    received: RangeSet | None = None

    def received_ids(self) -> RangeSet:
        ids = RangeSet()
        if self.received is not None:
            for start, stop in self.received:
                ids.add_range(start, stop)
        ids.add_range(0, self.point_of_reference)
        return ids


@dataclass
class InboundStream:
    """One stream as the worker sees it across a session."""

    stream_id: int
    stream_name: str
    received: RangeSet = field(default_factory=RangeSet)
    unstable: RangeSet = field(default_factory=RangeSet)
    state: StreamState = StreamState.START
    eos_id: int | None = None  # id of the EOS that closed the stream, if any
    last_id: int | None = None  # latest id received in order since the last NOTIFY

    @classmethod
    def from_durable(cls, durable: DurableStream) -> InboundStream:
        return cls(durable.stream_id, durable.stream_name, durable.received_ids())

    @property
    def point_of_reference(self) -> int:
        """Exclusive upper bound of the stable ids received (see module docstring)."""
        point = self.received.base
        if point - 1 in self.unstable:
            for start, stop in self.unstable:
                if start <= point - 1 < stop:
                    return start
        return point

    def notify(self, stream_name: str, point: int) -> int:
        """Open the stream from the connector's ``point``; return the effective resume point.

        Ids below the connector's point will never be sent, so they count as
        received; ids the worker already holds stay deduplicated either way.
        """
        self.state = step(STREAM_TRANSITIONS, self.state, "notify")
        self.stream_name = stream_name
        self.eos_id = None
        self.last_id = None
        self.received.add_range(0, point)
        return self.point_of_reference

    def accepts(self, message: Record, in_order: bool) -> bool:
        """Whether a MESSAGE may arrive now (the stream is open).

        On unordered input a message sent before the EOS may arrive after it,
        so a stream closed by EOS still takes ids below the EOS id.
        """
        if self.state is StreamState.OPEN:
            return True
        return (
            self.state is StreamState.CLOSED
            and not in_order
            and self.eos_id is not None
            and message.message_id is not None
            and message.message_id < self.eos_id
        )

    def out_of_order(self, message: Record, in_order: bool) -> bool:
        """True if in-order input carries an id not above the previous one.

        Ids of a resumable stream strictly increase; accepting a lower id
        after gap filling would silently drop it, so it is an error instead.
        """
        mid = message.message_id
        return in_order and mid is not None and self.last_id is not None and mid <= self.last_id

    def receive(self, message: Record, in_order: bool) -> bool:
        """Record ``message``; return False if it is a duplicate to drop.

        The caller has checked :meth:`accepts`.
        """
        flags = message.flags
        if flags & EOS and self.state is StreamState.OPEN:
            self.state = step(STREAM_TRANSITIONS, self.state, "eos")
            self.eos_id = message.message_id
        if flags & EPHEMERAL:
            return True
        mid = message.message_id
        assert mid is not None  # guaranteed by the codec when not EPHEMERAL
        received = self.received
        if in_order:
            self.last_id = mid
            first_new = received.base
            if mid == first_new:
                received.add(mid)  # the usual next consecutive id: O(1), never held yet
            elif mid in received:
                return False
            else:
                received.add_range(0, mid + 1)
        elif received.insert(mid):
            first_new = mid
        else:
            return False
        if flags & UNSTABLE_REFERENCE:
            # A filled gap has no stable message to anchor it either.
            self.unstable.add_range(min(first_new, mid), mid + 1)
        return True

    def terminate(self) -> None:
        self.state = step(STREAM_TRANSITIONS, self.state, "restart")
