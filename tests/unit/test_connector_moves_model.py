"""A producer moving between two bridges, in the sans-IO machines: every record ends committed, none lost.

The connector's real session and :class:`~aqueduct.connector.outbound.Outbox`
against the real worker session, over two stores standing in for two
bridges' logs. A store adopts a NOTIFY's point for a stream new to it (as
the bridge's log does) and its point is the first id it lacks, so a
NOTIFY pointing below what the producer will ever send again would stall
its ACKs for good. Its consumer commits (ACKs what is durable) only when a
fault says so; what it commits reaches the sink. Faults: the connection
drops with bytes in flight (the producer comes back to the same bridge),
it moves to the other bridge, or the bridge it was on loses its log and it
moves. Verdicts: every record acked, the sink holds every id with its
payload (an id committed by one bridge whose ACK was lost may be committed
by the other too: the source reads by id), and no store holds an id twice.
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from aqueduct.connector.connector_session import ConnectorSession
from aqueduct.connector.events import RecordsAccepted, StreamNotified
from aqueduct.connector.inbound import DurableStream
from aqueduct.connector.outbound import ORDERED, Outbox
from aqueduct.connector.worker_session import WorkerConfig, WorkerSession
from aqueduct.wire.rangeset import RangeSet

SID = 1


class Store:
    """One bridge's log of the stream: the ids it holds, their payloads, and what its consumer committed."""

    def __init__(self) -> None:
        self.ids: RangeSet | None = None  # None: the stream is new here
        self.rows: dict[int, bytes] = {}
        self.stored = 0  # records stored, duplicates would count twice
        self.committed = 0  # the point its consumer committed

    def lookup(self, program: str, instance: str) -> list[DurableStream]:
        return [] if self.ids is None else [DurableStream(SID, "s", self.ids.base, self.ids)]

    def notified(self, event: StreamNotified) -> None:
        if self.ids is None:
            self.ids = RangeSet()
        self.ids.add_range(0, event.point_of_reference)  # ids below the NOTIFY's point never come

    def store(self, event: RecordsAccepted) -> None:
        assert self.ids is not None
        for m in event.records:
            assert m.message_id is not None and m.message_id not in self.ids
            self.ids.add(m.message_id)
            self.rows[m.message_id] = m.payload  # type: ignore[assignment]
            self.stored += 1

    def commit(self, sink: list[tuple[int, bytes]]) -> int:
        """The consumer commits everything durable below the point; returns the point to ACK."""
        assert self.ids is not None
        point = self.ids.base
        sink += [(mid, self.rows[mid]) for mid in sorted(self.rows) if self.committed <= mid < point]
        self.committed = max(self.committed, point)
        return point


@settings(max_examples=80, deadline=None)
@given(
    total=st.integers(1, 40),
    credits=st.integers(2, 8),
    faults=st.lists(
        st.tuples(st.sampled_from(["drop", "move", "wipe"]), st.integers(1, 40), st.booleans()), max_size=8
    ),
)
@example(total=20, credits=4, faults=[("move", 3, False), ("move", 3, True)])  # back on a bridge behind the ACKs
def test_a_producer_moving_between_bridges_gets_every_record_committed(
    total: int, credits: int, faults: list[tuple[str, int, bool]]
) -> None:
    stores = [Store(), Store()]
    at = 0
    sink: list[tuple[int, bytes]] = []
    outbox = Outbox()
    payloads = [b"m%d" % i for i in range(total)]
    created = 0
    faults = [*faults, ("step", 10_000, True)]

    for kind, budget, commits in faults:
        store = stores[at]
        conn = ConnectorSession("p", "i")
        worker = WorkerSession(WorkerConfig(initial_credits=credits), store.lookup)
        conn.start()
        to_worker = b"".join(b for _, b in conn.data_to_send())
        for _ in range(budget):
            for event in worker.receive_data(to_worker):
                if isinstance(event, StreamNotified):
                    store.notified(event)
                elif isinstance(event, RecordsAccepted):
                    store.store(event)
                    worker.ack(credits=len(event.records))  # durable: the credits come back
            to_worker = b""
            if commits and store.ids is not None:
                worker.ack([(SID, store.commit(sink))])
            for event in conn.receive_data(worker.data_to_send()):
                outbox.apply(event)
            if SID not in outbox.streams:
                outbox.open(SID, "s", ORDERED)
            stream = outbox.streams[SID]
            while created < total and len(outbox) < credits:
                outbox.push([stream.make_message(payloads[created])])
                created += 1
            outbox.send_into(conn)
            to_worker = b"".join(b for _, b in conn.data_to_send())
            if created == total and not stream.unacked and not to_worker:
                break
        # Every fault ends the connection with bytes in flight.
        if kind == "wipe":
            stores[at] = Store()  # killed, its log directory deleted
        if kind in ("move", "wipe"):
            at = 1 - at

    stream = outbox.streams[SID]
    assert not stream.unacked and stream.acked == total
    assert {mid for mid, _ in sink} == set(range(total))
    assert all(payload == payloads[mid] for mid, payload in sink)
    assert all(s.stored == len(s.rows) for s in stores)  # no store took an id twice
