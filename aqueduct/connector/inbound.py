"""Worker-side bookkeeping of one stream across a session: its state and its points.

Deduplication and the point of reference follow the one rulebook,
:class:`~aqueduct.connector.points.StreamPoints`, seeded with what the
worker's durable storage already holds so that a resume's duplicates are
dropped before they cost the sink anything. What is left here is the
session's own business: the stream state machine (NOTIFY opens, EOS
closes) and the rule that ids on an in-order channel must increase.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aqueduct.connector.frames import EOS, UNSTABLE_REFERENCE
from aqueduct.connector.points import StreamPoints
from aqueduct.connector.states import STREAM_TRANSITIONS, StreamState, step
from aqueduct.wire.modes import Mode
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
    points: StreamPoints = field(default_factory=StreamPoints)
    state: StreamState = StreamState.START
    eos_id: int | None = None  # id of the EOS that closed the stream, if any
    last_id: int | None = None  # latest id received in order since the last NOTIFY

    @classmethod
    def from_durable(cls, durable: DurableStream) -> InboundStream:
        points = StreamPoints(received=durable.received_ids(), point=durable.point_of_reference)
        return cls(durable.stream_id, durable.stream_name, points)

    @property
    def point_of_reference(self) -> int:
        """Exclusive upper bound of the stable ids received (see :mod:`.points`)."""
        return self.points.point

    def notify(self, stream_name: str, point: int, mode: Mode) -> int:
        """Open the stream from the connector's ``point``; return the effective resume point.

        Ids below the connector's point will never be sent, so they count as
        received; ids the worker already holds stay deduplicated either way.
        """
        self.state = step(STREAM_TRANSITIONS, self.state, "notify")
        self.stream_name = stream_name
        self.eos_id = None
        self.last_id = None
        self.points.set_mode(mode)
        return self.points.start_from(point)

    def accepts(self, message_id: int | None, in_order: bool) -> bool:
        """Whether a MESSAGE with this id may arrive now (the stream is open).

        On unordered input a message sent before the EOS may arrive after it,
        so a stream closed by EOS still takes ids below the EOS id.
        """
        if self.state is StreamState.OPEN:
            return True
        return (
            self.state is StreamState.CLOSED
            and not in_order
            and self.eos_id is not None
            and message_id is not None
            and message_id < self.eos_id
        )

    def out_of_order(self, message_id: int | None, in_order: bool) -> bool:
        """True if in-order input carries an id not above the previous one.

        Ids of a resumable stream strictly increase; accepting a lower id
        would silently drop it as a duplicate, so it is an error instead.
        """
        return in_order and message_id is not None and self.last_id is not None and message_id <= self.last_id

    def receive(self, flags: int, message_id: int | None, in_order: bool) -> bool:
        """Take one MESSAGE (its flag bits and id); return False if it is a duplicate to drop.

        The caller has checked :meth:`accepts`. Flags and id rather than a
        :class:`~aqueduct.connector.frames.Message`: the session reads them
        from a batch's columns.
        """
        if flags & EOS and self.state is StreamState.OPEN:
            self.state = step(STREAM_TRANSITIONS, self.state, "eos")
            self.eos_id = message_id
        if message_id is None:
            return True  # EPHEMERAL
        if in_order:
            self.last_id = message_id
        return bool(flags & UNSTABLE_REFERENCE) or self.points.receive(message_id)

    def receive_run(self, start: int, stop: int, in_order: bool) -> bool:
        """Take a run of new data records, ids ``start .. stop - 1``, at once if it can be; else change nothing.

        A run is what a busy stream's channel carries
        (:attr:`MessageBatch.is_run <aqueduct.connector.batch.MessageBatch.is_run>`).
        Taken whole when all its ids are above what the stream holds and
        the stream is open, leaving the state :meth:`receive` of each would;
        otherwise (a possible duplicate, an id not above the last, a closed
        stream) it returns False and the caller applies the rules record by
        record, which also names any error.
        """
        if self.state is not StreamState.OPEN or (in_order and self.last_id is not None and start <= self.last_id):
            return False
        if not self.points.receive_run(start, stop):
            return False
        if in_order:
            self.last_id = stop - 1
        return True

    def terminate(self) -> None:
        self.state = step(STREAM_TRANSITIONS, self.state, "restart")
