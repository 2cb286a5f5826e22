"""Worker-side bookkeeping of one stream across a session: its state and its points.

Deduplication and the point of reference follow the one rulebook,
:class:`~aqueduct.records.points.StreamPoints`, seeded with what the
worker's durable storage already holds so that a resume's duplicates are
dropped before they cost the sink anything. What is left here is the
session's own business: the stream state machine (NOTIFY opens, EOS
closes) and the rule that ids on an in-order channel must increase.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aqueduct.connector.batch import MessageBatch
from aqueduct.connector.frames import EOS, UNSTABLE_REFERENCE
from aqueduct.connector.states import STREAM_TRANSITIONS, StreamState, step
from aqueduct.records.points import StreamPoints
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

    def receive(self, batch: MessageBatch, in_order: bool, count: int) -> tuple[MessageBatch | None, int, str | None]:
        """Take the first ``count`` records of one of this stream's batches, in order, by the rules.

        Returns the batch of the new records (None if none), how many were
        dropped as duplicates, and the first rule a record broke (None if
        none did), the records before it taken as the spec wants everything
        before a bad frame processed. ``in_order``: the channel delivers in
        order, so ids must increase. A single record is the batch of one.

        A run on an open stream whose first id is above the last (what a
        busy stream's channel carries) needs none of the per-record rules:
        its ids go to the points in one call. Anything else goes through
        :meth:`_check_each` first.
        """
        if batch.flags is None and self.state is StreamState.OPEN:
            start, last = batch.first_id, self.last_id
            if not in_order or last is None or start > last:
                if count and in_order:
                    self.last_id = start + count - 1
                mask = self.points.receive(range(start, start + count))
                if mask is None and count == len(batch.payloads):  # the busy path: every record new
                    return batch, 0, None
                return _kept(batch, mask, count) + (None,)
        ids, error = self._check_each(batch, in_order, count)
        return _kept(batch, self.points.receive(ids), len(ids)) + (error,)

    def _check_each(self, batch: MessageBatch, in_order: bool, count: int) -> tuple[list[int | None], str | None]:
        """The session's rules per record (an open stream, increasing ids in order, EOS closes):
        the ids to deduplicate (None: not stable) up to the first record that breaks one, and its error.

        On unordered input a message sent before the EOS may arrive after it,
        so a stream closed by EOS still takes ids below the EOS id. Ids of a
        resumable stream strictly increase: accepting a lower id in order
        would silently drop it as a duplicate, so it is an error instead.
        """
        flags, ids, _ = batch.columns()
        stable: list[int | None] = []
        for f, message_id in zip(flags[:count], ids[:count], strict=True):  # bounded by the batch
            if self.state is not StreamState.OPEN and not (
                self.state is StreamState.CLOSED
                and not in_order
                and self.eos_id is not None
                and message_id is not None
                and message_id < self.eos_id
            ):
                return stable, f"message for unknown stream {self.stream_id}"
            if in_order and message_id is not None and self.last_id is not None and message_id <= self.last_id:
                return stable, (
                    f"MESSAGE: id {message_id} not above {self.last_id} on stream {self.stream_id} (ids must increase)"
                )
            if f & EOS and self.state is StreamState.OPEN:
                self.state = step(STREAM_TRANSITIONS, self.state, "eos")
                self.eos_id = message_id
            if message_id is not None and in_order:
                self.last_id = message_id
            stable.append(None if message_id is None or f & UNSTABLE_REFERENCE else message_id)
        return stable, None

    def terminate(self) -> None:
        self.state = step(STREAM_TRANSITIONS, self.state, "restart")


def _kept(batch: MessageBatch, mask: list[bool] | None, n: int) -> tuple[MessageBatch | None, int]:
    """The batch of the first ``n`` rows that the points' ``mask`` kept (None if none), and how many it dropped."""
    rows = range(n) if mask is None else [row for row, new in enumerate(mask) if new]
    return (batch.select(rows) if rows else None), n - len(rows)
