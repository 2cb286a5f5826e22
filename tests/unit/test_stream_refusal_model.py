"""Hypothesis state machine: a connector with streams a worker refuses, over sessions that end and resume.

The sans-IO pieces as the client drives them (:class:`Outbox` and its
streams, :class:`ConnectorSession`) against a :class:`WorkerSession`
whose sink refuses every NOTIFY of a denied stream, as the bridge's
ingest does (:meth:`WorkerSession.refuse_stream`), stores the other
streams' records and acks them at once. Streams are opened and sent on in
any order, input reaches the worker in chunks cut anywhere. Whatever the
order:

* nothing of a denied stream is ever stored, and once refused a stream is
  never notified again, so each refusal costs one session, no more;
* the connector's refused streams are exactly the denied ones it opened,
  each with the rule the worker named; their sends raise the refusal and
  every record they handed over is given back once, for its report;
* every record of an allowed stream is stored exactly once and acked.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from aqueduct.connector.connector_session import ConnectorSession
from aqueduct.connector.errors import StreamRefused
from aqueduct.connector.events import NotifyRefused, RecordsAccepted, SessionEnded, StreamNotified
from aqueduct.connector.frames import ConnectorMessage
from aqueduct.connector.inbound import DurableStream
from aqueduct.connector.outbound import Outbox
from aqueduct.connector.states import ConnectionState
from aqueduct.connector.worker_session import WorkerConfig, WorkerSession
from aqueduct.wire.modes import Mode

STREAM_IDS = range(5)
DENIED = frozenset({1, 3})


def rule_for(stream_id: int) -> str:
    return f"stream_not_allowed: stream 's{stream_id}' (id {stream_id}) is not in streams allowed-*"


class RefusalMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.outbox = Outbox()
        self.stored: dict[int, list[int]] = {}  # what the worker's sink made durable, per stream
        self.given_back: dict[int, list[int]] = {}  # ids of records a refusal handed back, per stream
        self.handed_over: dict[int, int] = {}  # records the producer handed over, per stream
        self.notified_after_refusal: list[int] = []
        self.sessions = 0
        self._connect()

    # ------------------------------------------------------------ the sessions

    def _connect(self) -> None:
        """A new connection: HELLO, OK with what the worker holds, the outbox's resume plan."""
        self.sessions += 1
        self.connector = ConnectorSession("p", "i")
        self.worker = WorkerSession(WorkerConfig(initial_credits=8), self._durable)
        self.connector.start()
        self._to_worker([self._outgoing()])

    def _durable(self, program: str, instance: str) -> list[DurableStream]:
        return [DurableStream(sid, f"s{sid}", len(ids)) for sid, ids in self.stored.items()]

    def _outgoing(self) -> bytes:
        return b"".join(data for _, data in self.connector.data_to_send())

    def _to_worker(self, chunks: list[bytes]) -> None:
        """Feed the worker ``chunks`` and act as the ingest: refuse denied streams, store and ack the rest."""
        for chunk in chunks:
            for event in self.worker.receive_data(chunk):
                if self.worker.ended:
                    break  # a refusal ended the session: the ingest forgets what was still in flight
                if isinstance(event, StreamNotified):
                    stream = self.outbox.streams.get(event.stream_id)
                    if stream is not None and stream.refused is not None:
                        self.notified_after_refusal.append(event.stream_id)
                    if event.stream_id in DENIED:
                        self.worker.refuse_stream(event.stream_id, rule_for(event.stream_id))
                elif isinstance(event, RecordsAccepted):
                    ids = self.stored.setdefault(event.stream_id, [])
                    ids += [r.message_id for r in event.records]
                    self.worker.ack([(event.stream_id, len(ids))], len(event.records.payloads))
        self._to_connector(self.worker.data_to_send())

    def _to_connector(self, data: bytes) -> None:
        """Feed the connector the worker's answer and act as the client: give refused streams up, reconnect."""
        ended = None
        for event in self.connector.receive_data(data) if data else []:
            if isinstance(event, NotifyRefused):
                stream = self.outbox.streams[event.stream_id]
                if stream.refused is None:
                    dropped = stream.refuse(event.rule)
                    self.given_back.setdefault(event.stream_id, []).extend(r.message_id for r in dropped)
            elif isinstance(event, SessionEnded):
                ended = event
            else:
                self.outbox.apply(event)
        if ended is not None:
            assert ended.origin == "peer", ended  # nothing else ends a session here
            self._connect()

    # ------------------------------------------------------------ what the producer does

    @rule(stream_id=st.sampled_from(STREAM_IDS))
    def open_stream(self, stream_id: int) -> None:
        existing = self.outbox.streams.get(stream_id)
        if existing is not None and existing.refused is not None:
            with pytest.raises(StreamRefused):
                self.outbox.open(stream_id, f"s{stream_id}", Mode.ORDERED)
        elif existing is None:
            self.outbox.open(stream_id, f"s{stream_id}", Mode.ORDERED)

    @precondition(lambda self: self.outbox.streams)
    @rule(data=st.data(), count=st.integers(1, 5))
    def send(self, data: st.DataObject, count: int) -> None:
        stream = self.outbox.streams[data.draw(st.sampled_from(sorted(self.outbox.streams)))]
        payloads = [b"x"] * count
        if stream.refused is not None:
            with pytest.raises(StreamRefused) as raised:
                stream.make_messages(payloads, None, False)
            assert str(raised.value) == rule_for(stream.stream_id)
            return
        records: list[ConnectorMessage] = stream.make_messages(payloads, None, False)
        self.outbox.push(records)
        self.handed_over[stream.stream_id] = self.handed_over.get(stream.stream_id, 0) + count

    @rule(cuts=st.lists(st.integers(0, 400), max_size=3))
    def deliver(self, cuts: list[int]) -> None:
        """What the credits let out goes to the worker, cut into chunks anywhere."""
        if self.connector.state is not ConnectionState.STREAMING:
            return
        self.outbox.send_into(self.connector)
        data = self._outgoing()
        bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
        self._to_worker([data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)] or [b""])

    # ------------------------------------------------------------ what must hold

    @invariant()
    def nothing_denied_is_stored_and_nothing_refused_comes_back(self) -> None:
        assert not DENIED & self.stored.keys()
        assert self.notified_after_refusal == []
        refused = {sid for sid, s in self.outbox.streams.items() if s.refused is not None}
        assert refused <= DENIED
        assert self.sessions == 1 + len(refused)  # one session per refusal, never more

    @invariant()
    def stored_once(self) -> None:
        for ids in self.stored.values():
            assert ids == list(range(len(ids)))  # each id once, in order

    def teardown(self) -> None:
        """Deliver until nothing is left: every allowed record stored and acked, every refused one given back."""
        for _ in range(200):  # bounded: each round either sends or ends a session (at most one per stream)
            if not len(self.outbox):
                break
            self.deliver([])
        assert len(self.outbox) == 0
        for sid, stream in self.outbox.streams.items():
            if sid in DENIED:
                assert stream.refused is not None and stream.refused.reason == rule_for(sid)
                assert sorted(self.given_back.get(sid, [])) == list(range(self.handed_over.get(sid, 0)))
                assert not stream.unacked
            else:
                assert self.stored.get(sid, []) == list(range(self.handed_over.get(sid, 0)))
                assert not stream.unacked and stream.refused is None


RefusalMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("AQ_REFUSAL_EXAMPLES", "60")),
    stateful_step_count=30,
    deadline=None,
)
TestStreamRefusalModel = RefusalMachine.TestCase
