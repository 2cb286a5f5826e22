"""The ingest service: the durable sink behind every connector session.

Connector transports (QUIC/Aqueduct and TCP) run one sans-IO
:class:`~aqueduct.connector.worker_session.WorkerSession` per connection and
hand its events here. This module turns them into log records and decides
when producers may send more and what they may forget:

* **Credits only for durable data.** Accepted messages are appended to the
  :class:`~aqueduct.bridge.storage.log.DurableLog` buffer; a group commit (one
  fsync for everything buffered since the last one) makes them durable, and
  only then does each session get its spent credits back. So the bytes a
  producer can have in the bridge's memory are bounded by its credits.
* **Backlog bound.** A log that Spark does not keep up with would otherwise
  grow without limit on disk. While the *consumable* backlog (records in
  complete epochs that Spark has not committed, summed over streams)
  exceeds ``max_lag``, credits earned by group commits are withheld; they are
  released as Spark commits. Records of a still-open epoch do not count:
  Spark cannot read them until the producer sends the BOUNDARY, which needs
  credits, so counting them could deadlock.
* **A full disk.** A group commit that finds no room (:class:`LogFull`)
  is held by the log and retried with backoff (:data:`FULL_RETRY`); its
  credits go back to the sessions' unsynced count, so producers run out of
  credits and wait, keeping their unacked records, while everything durable
  stays so. The bridge says so once when it starts and once when it ends
  (:attr:`Ingest.disk_full`), and goes on by itself when space returns.
* **Resume.** OK lists, per stream the connector (program + instance) used
  before, the log's *durable* point of reference; the session drops ids
  below it, and the log's own range set drops the rest (ids buffered but
  not yet durable when a producer reconnected, or arriving out of order).
* **Exactly-once acks.** :meth:`Ingest.on_committed` is called with the
  per-stream log offsets of the last micro-batch Spark committed in its
  sink (the minimum over the queries that drive acks, see
  :mod:`aqueduct.bridge.storage.consumers`). Each connector then gets an ACK with
  the points of reference covering those offsets, once ``acked.json``
  records the offsets durably: a restarted bridge starts from that file,
  so no connector is ever told a lower point than before (the commit
  files it also reads trail Spark by a micro-batch). :meth:`Ingest.truncate_below`
  separately lets the log drop segments no registered consumer needs
  (unless retention keeps them).

Everything here runs on the bridge's event loop thread, except the group
commit's file work: the log writes and fsyncs each group on its own I/O
thread while the loop keeps reading and the next group accumulates; the
credits a group earned go out when its group commit is done. The transports call
:meth:`Ingest.durable_streams` and :meth:`Ingest.handle` (the
``WorkerSink`` protocol of :mod:`aqueduct.connector.worker.server`).

Two commits meet here and each has one name: the **group commit**
(:meth:`Ingest.group_commit`, ``group_commit_delay``/``_interval``: the
log's writes and fsync, after which records are *durable* and earn their
credits back) and the **sink commit** (Spark committed a micro-batch in its
sink: :meth:`Ingest.on_committed`, :meth:`Ingest.committed_offsets`; the
bare words *commit* and *committed* mean this one, and only it moves acks).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TypeVar

from aqueduct.bridge.ingest.credit_budget import CreditBudget, RecordSize
from aqueduct.bridge.ingest.latency import Histogram
from aqueduct.bridge.storage.acked import restore_acked
from aqueduct.bridge.storage.commits import acks_for
from aqueduct.bridge.storage.log import DurableLog, LogError, LogFull
from aqueduct.connector.batch import MessageBatch
from aqueduct.connector.events import (
    HelloAccepted,
    RecordsAccepted,
    SessionEnded,
    StreamNotified,
    WorkerEvent,
)
from aqueduct.connector.inbound import DurableStream
from aqueduct.connector.worker.server import WorkerPeer
from aqueduct.logs import fields

logger = logging.getLogger(__name__)


def _report_failed_write(done: Future[object]) -> None:
    """Log a failed trim or acked-file write (it costs disk or a stale status, never a record)."""
    if not done.cancelled() and done.exception() is not None:
        logger.error("the log's I/O thread failed to trim or record acks: %r", done.exception())


def connector_name(program_name: str, instance_name: str) -> str:
    """The log's owner name of a connector: streams are resumed per program + instance."""
    return f"{program_name}/{instance_name}"


REFUSAL_KINDS = ("bad_cookie", "protocol_version", "stream_owner", "protocol_violation", "connector_error")


def refusal_kind(ended: SessionEnded) -> str:
    """Which of :data:`REFUSAL_KINDS` a session ended by an ERROR is (a label for metrics and logs).

    ``connector_error``: the connector sent ERROR itself; the others are the
    bridge's refusals, told apart by their reasons' fixed beginnings
    (docs/connector.md lists them); ``protocol_violation`` is every frame
    error and rule broken.
    """
    reason = ended.reason
    if ended.origin == "peer":
        return "connector_error"
    if reason.startswith("bad cookie"):
        return "bad_cookie"
    if reason.startswith("unsupported protocol version"):
        return "protocol_version"
    if " belongs to connector " in reason:  # the log's refusal of another connector's stream id
        return "stream_owner"
    return "protocol_violation"


@dataclass(frozen=True)
class IngestConfig:
    """Flow-control policy of the ingest service."""

    max_lag: int = 200_000  # records Spark may lag behind before credits stop
    group_commit_delay: float = 0.002  # seconds to gather a group before its group commit
    #: seconds from one group commit's start to the next one's at the least. Spark writes its
    #: Parquet files and checkpoint to the same disks: a paced producer otherwise gets a group
    #: commit (an fsync or more) every few ms, and at hundreds of fsyncs a second Spark's
    #: micro-batch took 2.3x as long (docs/performance.md, issue 29). A record arriving after
    #: a quiet spell still waits only ``group_commit_delay``.
    group_commit_interval: float = 0.02
    #: credits all sessions may hold together (None: each session has its own,
    #: unbounded in total); see :mod:`aqueduct.bridge.ingest.credit_budget`
    credit_budget: int | None = None
    session_credits: int = 4096  # under a budget: the most one session may hold
    #: bytes of records (payload and key) all sessions may have in flight together,
    #: turned into credits by the recent mean record size (None: no byte bound);
    #: with ``credit_budget`` too, the smaller of the two applies
    memory_budget: int | None = None

    @property
    def shares_credits(self) -> bool:
        """Sessions draw their credits from one pool (start with none of their own)."""
        return self.credit_budget is not None or self.memory_budget is not None


T = TypeVar("T")

#: seconds between retries of a group commit the full disk refused: first, factor, most
FULL_RETRY = (0.05, 2.0, 5.0)


@dataclass
class _Session:
    connector: str
    unsynced: int = 0  # credits spent on records not yet in a group commit
    in_group_commit: int = 0  # credits spent on records of a group commit in flight
    withheld: int = 0  # credits earned but held back by the backlog bound


async def _outlast_cancel(job: Future[T]) -> tuple[T, bool]:
    """Wait for a job of the log's I/O thread even if cancelled meanwhile.

    A thread cannot be stopped halfway: abandoning the job would leave a
    group durable and visible whose credits never go out, or let the log be
    closed under it. Returns the result and whether a cancellation arrived
    (the caller finishes its bookkeeping, then re-raises it). The loop runs
    once per cancellation request and ends when the job does (one group's
    writes and fsyncs).
    """
    waiter = asyncio.wrap_future(job)
    cancelled = False
    while not waiter.done():
        try:
            await asyncio.shield(waiter)
        except asyncio.CancelledError:
            cancelled = True
    return waiter.result(), cancelled


@dataclass
class IngestCounters:
    """Totals since start, for progress lines, the metrics endpoint and tests."""

    messages: int = 0  # data records appended (boundaries excluded)
    duplicates: int = 0  # dropped by the log's range set (the session drops others itself)
    withheld_credits: int = 0  # credits currently held back by the backlog bound
    sessions: int = 0  # live sessions
    sessions_started: int = 0  # handshakes completed
    #: sessions ended by an ERROR (the bridge's refusals and the connectors' own), by :func:`refusal_kind`
    refusals: Counter[str] = field(default_factory=Counter)
    durable_bytes: int = 0  # payload and key bytes of the records group commits made durable
    credits_granted: int = 0  # credits sent with OK (unless shared) and after group commits
    group_commit_seconds: Histogram = field(default_factory=Histogram)  # group commits, writes and fsyncs


class Ingest:
    """Sink of connector session events; owner of the log's write side."""

    def __init__(self, durable_log: DurableLog, config: IngestConfig | None = None) -> None:
        self.log = durable_log
        self.config = config or IngestConfig()
        self.counters = IngestCounters()
        self._sessions: dict[WorkerPeer, _Session] = {}
        #: connector -> its open sessions, oldest HELLO first (usually one; two while it
        #: reconnects); its acks go to the newest (:meth:`_ack_target`)
        self._connector_sessions: dict[str, list[WorkerPeer]] = {}
        self._committed: dict[int, int] = {}  # stream -> offset Spark committed in its sink
        #: stream -> offset whose point connectors may be told: durable in acked.json
        self._acked: dict[int, int] = {}
        #: stream -> point computed for an ACK, sent once acked.json holds its offset
        self._unsent: dict[int, int] = {}
        self._ack_writes: set[asyncio.Task[None]] = set()
        #: why group commits wait for space, and since when (time.monotonic()); None while they succeed
        self.disk_full: tuple[str, float] | None = None
        self._acks_unrecorded = False  # acked.json could not be written: said once
        self._complete: dict[int, int] = {}  # stream -> end of its last complete epoch
        self._truncated: dict[int, int] = {}  # stream -> offset last asked to truncate below
        self._lag = 0  # sum over streams of complete - committed, kept as they move (not summed per commit)
        #: sessions holding earned credits not yet sent (the tap was closed, or nothing went out yet)
        self._owed: set[WorkerPeer] = set()
        acked = restore_acked(self.log.path)
        for sid in self.log.stream_ids():
            committed = max(self.log.snapshot(sid).earliest, min(acked.get(sid, 0), self.log.durable_end(sid)))
            self._move(sid, complete=self.log.complete_offset(sid), committed=committed)
            self._acked[sid] = committed
        self._dirty = asyncio.Event()
        #: mean record size, for turning ``memory_budget`` into credits
        self._record_size = RecordSize()
        self._unsynced_bytes = 0  # payload and key bytes appended since the last group commit
        self._budget = (
            CreditBudget(self._budget_records(), self.config.session_credits)
            if self.config.shares_credits
            else None
        )

    # ------------------------------------------------------------ session side

    def durable_streams(self, program_name: str, instance_name: str) -> list[DurableStream]:
        """Streams this connector used before, at their durable points (for OK)."""
        return [
            DurableStream(sid, name, point)
            for sid, name, point in self.log.references_of(
                connector_name(program_name, instance_name)
            )
        ]

    async def handle(self, peer: WorkerPeer, event: WorkerEvent) -> None:
        """Apply one session event (the transport awaits it before reading on)."""
        if isinstance(event, RecordsAccepted):
            await self._on_messages(peer, event)
        elif isinstance(event, StreamNotified):
            await self._on_notified(peer, event)
        elif isinstance(event, HelloAccepted):
            name = connector_name(event.program_name, event.instance_name)
            self._sessions[peer] = _Session(name)
            self._connector_sessions.setdefault(name, []).append(peer)
            self.counters.sessions = len(self._sessions)
            self.counters.sessions_started += 1
            self.counters.credits_granted += event.credits
            logger.info(
                "session started: %s from %s, %d stream(s) to resume", name, peer.remote, len(event.refs),
                extra=fields(event="session_started", connector=name, remote=peer.remote),
            )  # fmt: skip
            self._ack_committed(peer, name)
            if self._budget is not None and (grant := self._budget.join(peer, event.credits)):
                self.counters.credits_granted += grant
                peer.grant_credits(grant)
        elif isinstance(event, SessionEnded):
            self._log_end(peer, event)
            self._forget(peer)

    def _log_end(self, peer: WorkerPeer, ended: SessionEnded) -> None:
        """One line per session end; a refusal (ERROR either way) as a warning, counted by kind."""
        state = self._sessions.get(peer)
        who = state.connector if state is not None else (
            connector_name(peer.program_name, peer.instance_name) if peer.program_name else "a connector"
        )  # fmt: skip
        info = {"connector": who, "remote": peer.remote, "reason": ended.reason}
        if ended.origin in ("local", "peer"):
            kind = refusal_kind(ended)
            self.counters.refusals[kind] += 1
            text = "%s from %s ended its session with ERROR: %s" if ended.origin == "peer" else "refused %s from %s: %s"
            logger.warning(text, who, peer.remote, ended.reason,
                           extra=fields(event="session_refused", kind=kind, **info))  # fmt: skip
        elif state is not None:
            logger.info("session ended: %s from %s: %s", who, peer.remote, ended.reason,
                        extra=fields(event="session_ended", **info))  # fmt: skip
        else:
            logger.info("connection from %s ended before HELLO: %s", peer.remote, ended.reason,
                        extra=fields(event="connection_ended", **info))  # fmt: skip

    def _ack_committed(self, peer: WorkerPeer, connector: str) -> None:
        """Tell a new session what Spark already committed of its connector's streams.

        OK's points only say what is durable; the connector keeps messages
        until an ACK says they are committed. An ACK sent to a session that
        has died since (or sent to none, while the connector was away) is
        lost, so without this a connector with nothing new to send would
        wait for a sink commit that already happened.
        """
        points = [
            (sid, self.log.reference_at(sid, self._acked[sid]))
            for sid, _, _ in self.log.references_of(connector)
            if self._acked.get(sid)
        ]
        if points:
            peer.ack(points)

    def _forget(self, peer: WorkerPeer) -> None:
        state = self._sessions.pop(peer, None)
        self._owed.discard(peer)
        if self._budget is not None:
            self._budget.leave(peer)
        if state is not None:
            self._hand_acks_on(state.connector, peer)
        self.counters.sessions = len(self._sessions)

    def _hand_acks_on(self, connector: str, ended: WorkerPeer) -> None:
        """A session ended: if the connector's acks went to it, they go to its other session now.

        A connector that gave up on an attempt (no OK in time) reconnects at
        once, and the bridge may read the abandoned attempt's HELLO after the
        new one's: the dead session then receives the acks until its end is
        read. Dropping the connector's ack target at that point (as this did)
        left the live session without acks for good; so the acks move to the
        remaining session, with everything committed so far.
        """
        sessions = self._connector_sessions.get(connector, [])
        was_target = bool(sessions) and sessions[-1] is ended
        if ended in sessions:
            sessions.remove(ended)
        if not sessions:
            self._connector_sessions.pop(connector, None)
        elif was_target:
            self._ack_committed(sessions[-1], connector)

    def _ack_target(self, connector: str) -> WorkerPeer | None:
        """The session a connector's acks go to: its newest open one."""
        sessions = self._connector_sessions.get(connector)
        return sessions[-1] if sessions else None

    async def _on_notified(self, peer: WorkerPeer, event: StreamNotified) -> None:
        state = self._sessions.get(peer)
        if state is None:
            return  # a refusal ended the session while this NOTIFY (of the same payload) waited
        try:
            # The stream's files are created on the log's I/O thread; this
            # session waits for them (the loop and other sessions do not).
            await asyncio.wrap_future(
                self.log.open_stream(
                    event.stream_id,
                    event.stream_name,
                    state.connector,
                    mode=event.mode,
                    point_of_reference=event.point_of_reference,
                )
            )
        except LogError as exc:  # e.g. the stream belongs to another connector: a refusal
            logger.warning("%s: stream %d refused: %s", state.connector, event.stream_id, exc)
            await peer.refuse_stream(event.stream_id, str(exc))
            return
        except OSError as exc:  # e.g. out of descriptors: the producer should come back, not give up
            logger.warning("stream %d of %s: cannot create its files (%s); asking it to reconnect",
                           event.stream_id, state.connector, exc)  # fmt: skip
            await peer.restart()
            return
        if event.stream_id not in self._complete:
            self._move(event.stream_id, complete=0, committed=0)

    async def _on_messages(self, peer: WorkerPeer, event: RecordsAccepted) -> None:
        state = self._sessions.get(peer)
        if state is None:
            return  # the session failed while this batch was in flight
        # Every message's credit comes back after the next group commit,
        # duplicates included (they cost the producer a credit too).
        state.unsynced += len(event.records)
        self._dirty.set()
        try:
            self._append(event.records)
        except LogError as exc:  # e.g. an id beyond Spark's signed 64-bit range
            await peer.fail(str(exc))

    def _append(self, batch: MessageBatch) -> None:
        """Buffer a batch in the log, which drops the ids it already holds (the session knows only its own)."""
        self._unsynced_bytes += batch.payload_bytes()
        try:
            self.log.append(batch)
        except LogError:  # it ends the batch: count what was appended before it
            self.counters.messages += batch.stored()[0]
            raise
        data, duplicates = batch.stored()
        self.counters.messages += data
        self.counters.duplicates += duplicates

    # ------------------------------------------------------------ group commit

    async def run(self) -> None:
        """Group-commit loop: runs until cancelled (a commit in flight is finished first).

        Group commits start at least ``group_commit_interval`` apart. While
        the disk is full it tries again after a growing pause, new records
        or not: the log holds the refused group.
        """
        loop = asyncio.get_running_loop()
        last = -self.config.group_commit_interval
        first, factor, most = FULL_RETRY
        pause = first
        while True:
            if self.disk_full is None:
                await self._dirty.wait()
                await asyncio.sleep(max(self.config.group_commit_delay, last + self.config.group_commit_interval - loop.time()))
                pause = first
            else:
                await asyncio.sleep(pause)
                pause = min(pause * factor, most)
            self._dirty.clear()
            last = loop.time()
            with contextlib.suppress(LogFull):
                await self.group_commit()

    async def group_commit(self) -> dict[int, int]:
        """Make everything buffered durable (one group commit), then return the credits it earned.

        Returns the new durable end offset of each stream the group touched.

        The writes and fsyncs run on the log's I/O thread; records arriving
        meanwhile join the next group. Cancelled while the thread works, it
        still waits for it and hands out the credits before re-raising.
        """
        earned = {peer: state.unsynced for peer, state in self._sessions.items() if state.unsynced}
        for peer, n in earned.items():
            state = self._sessions[peer]
            state.unsynced -= n
            state.in_group_commit += n
        group_bytes, self._unsynced_bytes = self._unsynced_bytes, 0
        started = time.perf_counter()
        try:
            ends, cancelled = await _outlast_cancel(self.log.start_commit())
        except LogFull as exc:
            self._refused(earned, group_bytes, exc)
            raise
        self.counters.group_commit_seconds.observe(time.perf_counter() - started)
        self.counters.durable_bytes += group_bytes
        if self.disk_full is not None:
            logger.warning("the log's disk has room again: group commits go on (%.1f s without)",
                           time.monotonic() - self.disk_full[1])  # fmt: skip
            self.disk_full = None
        for sid in ends:
            self._move(sid, complete=self.log.complete_offset(sid))
        if self._budget is not None and self.config.memory_budget is not None:
            self._record_size.made_durable(sum(earned.values()), group_bytes)
            self._budget.resize(self._budget_records())
        for peer, n in earned.items():
            state = self._sessions.get(peer)  # None: the session ended meanwhile
            if state is not None:
                state.in_group_commit -= n
                state.withheld += n if self._budget is None else self._budget.earned(peer, n)
                if state.withheld:
                    self._owed.add(peer)
        self._release_credits()
        if cancelled:
            raise asyncio.CancelledError
        return ends

    def _refused(self, earned: Mapping[WorkerPeer, int], group_bytes: int, exc: LogFull) -> None:
        """A group commit found the disk full: its credits wait for the retry that makes it durable."""
        for peer, n in earned.items():
            state = self._sessions.get(peer)
            if state is not None:
                state.in_group_commit -= n
                state.unsynced += n
        self._unsynced_bytes += group_bytes
        if self.disk_full is None:
            logger.error("%s; no credits are granted until it is durable, retrying", exc)
            self.disk_full = (str(exc), time.monotonic())

    def _move(self, sid: int, *, complete: int | None = None, committed: int | None = None) -> None:
        """Set a stream's complete and/or committed offset, keeping :attr:`lag` current in O(1)."""
        old_complete, old_committed = self._complete.get(sid, 0), self._committed.get(sid, 0)
        new_complete = old_complete if complete is None else complete
        new_committed = old_committed if committed is None else committed
        self._complete[sid], self._committed[sid] = new_complete, new_committed
        self._lag += max(0, new_complete - new_committed) - max(0, old_complete - old_committed)

    def _budget_records(self) -> int:
        """Credits the shared pool holds: ``credit_budget``, or fewer if ``memory_budget`` says so."""
        limits = [self.config.credit_budget] if self.config.credit_budget is not None else []
        if self.config.memory_budget is not None:
            limits.append(self._record_size.records_in(self.config.memory_budget))
        return min(limits)

    @property
    def buffered(self) -> int:
        """Records in memory not yet durable (bounded by the sessions' credits)."""
        return sum(s.unsynced + s.in_group_commit for s in self._sessions.values())

    @property
    def lag(self) -> int:
        """Records in complete epochs that Spark has not committed yet."""
        return self._lag

    def _release_credits(self, points_by_connector: Mapping[str, list[tuple[int, int]]] | None = None) -> None:
        """Send sessions their points and, unless the backlog is too long, their credits.

        Only the sessions concerned are visited (those owed credits, those
        short of credits under a budget, the owners of new points): this
        runs after every group commit, and a bridge holds thousands of
        mostly idle sessions.
        """
        points_by_connector = points_by_connector or {}
        open_tap = self._lag <= self.config.max_lag
        concerned = set(self._owed)
        if self._budget is not None:
            concerned |= self._budget.short
        concerned.update(peer for c in points_by_connector if (peer := self._ack_target(c)) is not None)
        for peer in concerned:
            state = self._sessions.get(peer)
            if state is None:
                continue
            if self._budget is not None:
                state.withheld += self._budget.top_up(peer)
            credits = state.withheld if open_tap else 0
            points = points_by_connector.get(state.connector, []) if self._ack_target(state.connector) is peer else []
            if credits or points:
                state.withheld -= credits
                self.counters.credits_granted += credits
                peer.ack(points, credits)
            if state.withheld:
                self._owed.add(peer)
            else:
                self._owed.discard(peer)
        self.counters.withheld_credits = sum(self._sessions[p].withheld for p in self._owed)

    # ------------------------------------------------------------ Spark side

    def committed_offsets(self) -> dict[int, int]:
        """Per stream, the log offset below which Spark has committed everything."""
        return dict(self._committed)

    def complete_offsets(self) -> dict[int, int]:
        """Per stream, the end of its last complete epoch (what a query may read)."""
        return dict(self._complete)

    def on_committed(self, positions: Mapping[int, int]) -> None:
        """Every query that drives acks committed each record below ``positions`` in its sink.

        Acks the new points of reference to the owning connectors and
        reopens the credit tap if the backlog shrank. Positions that do not
        advance are ignored, so the prompt signal and the safety net may
        both report the same batch. Truncation is separate
        (:meth:`truncate_below`): a slower consumer may still need the records.
        """
        advanced = {
            sid: offset
            for sid, offset in positions.items()
            if sid in self._complete and offset > self._committed[sid]  # a stream of this log
        }
        # (the log's own view: Spark may read a group the log published before its commit() resumed here)
        beyond = {sid: offset for sid, offset in advanced.items() if offset > self.log.complete_offset(sid)}
        if beyond:  # Spark reads complete epochs only: such a position is no commit of it
            logger.error("ignoring committed positions beyond the log's complete epochs: %s", beyond)
            advanced = {sid: offset for sid, offset in advanced.items() if sid not in beyond}
        self._unsent.update(acks_for(self.log, advanced))
        for sid, offset in advanced.items():
            self._move(sid, committed=offset)
        self._release_credits()  # the backlog shrank: credits need not wait for the file
        if advanced or (self._unsent and not self._ack_writes):  # new points, or a failed write's
            written = self.log.write_acked(self._committed)
            task = asyncio.ensure_future(self._send_acks(written, dict(self._committed), dict(self._unsent)))
            self._ack_writes.add(task)
            task.add_done_callback(self._ack_writes.discard)

    async def _send_acks(self, written: Future[None], offsets: dict[int, int], points: dict[int, int]) -> None:
        """Send ``points`` once ``acked.json`` holds ``offsets`` (those they cover) durably.

        What a connector is told must survive a crash: the restarted bridge
        answers from that file, never from the commit files that trail it.
        A failed write (a full disk) sends nothing; the next sink commit's write
        carries these points too. Writes finish in order (the log's one I/O
        thread), so points only move forward.
        """
        try:
            await asyncio.wrap_future(written)
        except OSError as exc:
            if not self._acks_unrecorded:
                logger.error("cannot record acked offsets (%s); acks wait until a write succeeds", exc)
                self._acks_unrecorded = True
            return
        self._acks_unrecorded = False
        for sid, offset in offsets.items():
            if offset > self._acked.get(sid, 0):
                self._acked[sid] = offset
        for sid, point in points.items():
            if self._unsent.get(sid) == point:
                del self._unsent[sid]
        points_by_connector: dict[str, list[tuple[int, int]]] = {}
        for sid, point in points.items():
            points_by_connector.setdefault(self.log.connector_of(sid), []).append((sid, point))
        self._release_credits(points_by_connector)

    def truncate_below(self, positions: Mapping[int, int]) -> None:
        """Let the log drop segments below ``positions``, never above what was acked.

        An acked point of reference is read from the record before the
        acked offset, so that record must stay until the ack moved on.
        """
        for sid, offset in positions.items():
            bound = min(offset, self._committed.get(sid, 0))
            if bound > self._truncated.get(sid, 0) and sid in self._complete:
                self._truncated[sid] = bound
                self.log.truncate(sid, bound).add_done_callback(_report_failed_write)
