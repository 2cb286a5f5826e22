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

from aqueduct.connector.events import RecordsAccepted, StreamNotified
from aqueduct.connector.inbound import DurableStream
from aqueduct.connector.outbound import ORDERED, RESEND_TURN, OutboundStream, Outbox
from aqueduct.connector.worker_session import WorkerConfig, WorkerSession
from aqueduct.wire.rangeset import RangeSet
from tests.connector_link import Link

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
        link = Link(outbox, WorkerSession(WorkerConfig(initial_credits=credits), store.lookup))
        for _ in range(budget):
            for event in link.to_worker():
                if isinstance(event, StreamNotified):
                    store.notified(event)
                elif isinstance(event, RecordsAccepted):
                    store.store(event)
                    link.worker.ack(credits=len(event.records))  # durable: the credits come back
            if commits and store.ids is not None:
                link.worker.ack([(SID, store.commit(sink))])
            link.to_connector()
            if SID not in outbox.streams:
                outbox.open(SID, "s", ORDERED)
            stream = outbox.streams[SID]
            while created < total and len(outbox) < credits:
                outbox.push([stream.make_message(payloads[created])])
                created += 1
            link.send()
            if created == total and not stream.unacked and not link.in_flight:
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


@settings(max_examples=100, deadline=None)
@given(
    buffers=st.lists(st.integers(0, 80), min_size=1, max_size=5),
    need=st.integers(1, 40),
    credits=st.integers(1, 64),
)
@example(buffers=[80, 80], need=1, credits=1)  # stream after stream, the second stream's first record never went
@example(buffers=[80, 80, 80], need=40, credits=64)
def test_a_moved_producer_resends_the_oldest_of_every_stream_first_so_a_bridge_over_max_lag_admits_what_a_query_waits_for(
    buffers: list[int], need: int, credits: int
) -> None:
    """The --max-lag deadlock of a failover read, as the producer's side of it.

    The producer moved to a bridge that has none of its streams, holding
    ``buffers[i]`` unacked records of stream ``i``. A batch the query planned
    on the bridge that died waits for the ``need`` oldest of each stream. The
    bridge is over ``--max-lag``: past the OK's ``credits`` it gives credits
    back only while this session's uncommitted records stay below its share.
    A share of ``need`` per stream plus one turn of the round robin (or the
    OK's grant, if larger) completes the batch, whatever the buffers; after
    it commits, the rest flows and every record is acked, once.
    """
    outbox = Outbox()
    for sid, n in enumerate(buffers):
        stream = outbox.streams[sid] = OutboundStream(sid, f"s{sid}")
        if n:
            stream.make_messages([b"%d/%d" % (sid, i) for i in range(n)], None, False)
    share = len(buffers) * need + max(credits, len(buffers) * RESEND_TURN)
    stored: dict[int, RangeSet] = {}
    held = owed = 0  # records stored and not committed; credits withheld
    batch_done = False
    link = Link(outbox, WorkerSession(WorkerConfig(initial_credits=credits), lambda program, instance: []))
    while True:  # bounded: every round trip stores a record or commits, else the verdict below
        progress = False
        for event in link.to_worker():
            if isinstance(event, RecordsAccepted):
                ids = stored.setdefault(event.stream_id, RangeSet())
                for m in event.records:
                    assert ids.insert(m.message_id)  # type: ignore[arg-type]  # never twice
                held += len(event.records)
                back = len(event.records) if held < share else 0
                owed += len(event.records) - back
                link.worker.ack(credits=back)
                progress = True
        waited = all(stored.get(sid, RangeSet()).base >= min(need, n) for sid, n in enumerate(buffers))
        if (batch_done or waited) and held:  # the batch committed, then whatever is durable after it
            batch_done = True
            link.worker.ack([(sid, ids.base) for sid, ids in stored.items()], credits=owed)
            held, owed, progress = 0, 0, True
        link.to_connector()
        link.send()
        if not progress and not link.in_flight:
            break
    assert batch_done or not any(buffers), f"the batch waits for good: {held} records held, share {share}"
    assert all(not s.unacked and s.acked == n for s, n in zip(outbox.streams.values(), buffers, strict=True))
