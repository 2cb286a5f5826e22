"""The ingest service: the durable sink behind every connector session.

Connector transports (QUIC/Aqueduct and TCP) run one sans-IO
:class:`~aqueduct.connector.worker_session.WorkerSession` per connection and
hand its events to :class:`Ingest` (the ``WorkerSink`` protocol of
:mod:`aqueduct.connector.worker.server`: :meth:`Ingest.durable_streams` and
:meth:`Ingest.handle`). This module is the sessions' side: who is
connected, which connector a session speaks for, its streams opened or
refused, its end logged and counted. What happens to a session's records
and credits belongs to the rooms it hands them to, in the order data
flows:

* :mod:`.group_commit`: records into the log's buffer, and the group
  commit (one fsync for all of them) that makes them durable;
* :mod:`.credits`: what the credits a group commit earned back become
  (sent, withheld while the :mod:`.backlog` is too long, shared under a
  budget);
* :mod:`.acks`: the way back, every ACK frame (points of reference after
  the sink commit, and credits) and the log's truncation.

**Resume.** OK lists, per stream the connector (program + instance) used
before, the log's *durable* point of reference; the session drops ids
below it, and the log's own range set drops the rest (ids buffered but
not yet durable when a producer reconnected, or arriving out of order).

Everything here runs on the bridge's event loop thread, except the group
commit's file work, on the log's own I/O thread.

Two commits meet in the ingest and each has one name: the **group commit**
(:meth:`Ingest.group_commit`, ``group_commit_delay``/``_interval``: the
log's writes and fsync, after which records are *durable* and earn their
credits back) and the **sink commit** (Spark committed a micro-batch in its
sink: :meth:`Ingest.on_committed`, :meth:`Ingest.committed_offsets`; the
bare words *commit* and *committed* mean this one, and only it moves acks).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import time
from collections.abc import Callable, Mapping

from aqueduct.auth.identity import Identity, Method
from aqueduct.auth.permissions import Denied
from aqueduct.bridge.ingest.acks import Acks
from aqueduct.bridge.ingest.backlog import Backlog
from aqueduct.bridge.ingest.config import IngestConfig
from aqueduct.bridge.ingest.counters import IngestCounters
from aqueduct.bridge.ingest.credits import Credits
from aqueduct.bridge.ingest.group_commit import GroupCommitWriter
from aqueduct.bridge.ingest.refusals import REFUSAL_KINDS, RefusalLog, refusal_kind
from aqueduct.bridge.storage.log import DurableLog, LogError, LogFull
from aqueduct.connector.events import (
    HelloAccepted,
    RecordsAccepted,
    SessionEnded,
    StreamNotified,
    WorkerEvent,
)
from aqueduct.connector.inbound import DurableStream
from aqueduct.connector.stream_refusal import stream_refusal
from aqueduct.connector.worker.server import WorkerPeer
from aqueduct.connector.worker_session import HelloRefused
from aqueduct.logs import fields

__all__ = ["REFUSAL_KINDS", "Ingest", "IngestConfig", "IngestCounters", "connector_name", "refusal_kind"]

logger = logging.getLogger(__name__)


def connector_name(program_name: str, instance_name: str) -> str:
    """The log's owner name of a connector: streams are resumed per program + instance."""
    return f"{program_name}/{instance_name}"


class Ingest:
    """Sink of connector session events; owner of the log's write side.

    It keeps the open sessions (and the connector each speaks for) and
    composes the rooms that write, credit and ack; the application reads
    its state through the few names below (:attr:`lag`, :attr:`buffered`,
    :attr:`disk_full`, the offsets) and feeds it sink commits.
    """

    def __init__(self, durable_log: DurableLog, config: IngestConfig | None = None) -> None:
        self.log = durable_log
        self.config = config or IngestConfig()
        self.counters = IngestCounters()
        self._sessions: dict[WorkerPeer, str] = {}  # open session -> the connector it speaks for
        self.backlog = Backlog()
        self.writer = GroupCommitWriter(durable_log, self.config, self.counters)
        self.credits = Credits(self.config, self.backlog, self.counters)
        self.acks = Acks(durable_log, self.backlog, self.credits, self._sessions, self.counters)
        self.refusals = RefusalLog(self.counters.refusals)
        #: the ERROR of a stream refusal that ends (or may end) its session: counted and logged with the stream
        self._stream_refused: dict[WorkerPeer, str] = {}
        #: the ERROR every HELLO gets once the bridge takes no new sessions (:meth:`turn_away`)
        self.turning_away: str | None = None
        #: why the last new stream's files found no room on the log's disk, and since when (None: room was found)
        self._no_room_for_streams: tuple[str, float] | None = None

    # ------------------------------------------------------------ session side

    def durable_streams(self, program_name: str, instance_name: str) -> list[DurableStream]:
        """Streams this connector used before, at their durable points (for OK); refused while turning away."""
        if self.turning_away is not None:
            raise HelloRefused(self.turning_away)
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
            self._on_hello(peer, event)
        elif isinstance(event, SessionEnded):
            self._log_end(peer, event)
            self._forget(peer)

    def _on_hello(self, peer: WorkerPeer, event: HelloAccepted) -> None:
        name = connector_name(event.program_name, event.instance_name)
        self._sessions[peer] = name
        self.counters.sessions = len(self._sessions)
        self.counters.sessions_started += 1
        self.counters.credits_granted += event.credits
        logger.info(
            "session started: %s from %s, %d stream(s) to resume", name, peer.remote, len(event.refs),
            extra=fields(event="session_started", connector=name, remote=peer.remote),
        )  # fmt: skip
        self.acks.joined(peer, name, self.credits.joined(peer, event.credits))

    async def turn_away(self, reason: str) -> int:
        """Take no new sessions and send the open ones elsewhere; return how many were ended.

        From now on every HELLO is answered with ERROR ``reason`` instead of
        OK (a busy refusal naming when to come back, see
        :mod:`aqueduct.runtime.retry_hint`);
        every open session ends with RESTART, so its connector reconnects
        at once, is refused, and moves to another bridge or waits. What the
        sessions sent before stays in the group commit and the log.
        """
        self.turning_away = reason
        peers = list(self._sessions)
        for peer in peers:
            await peer.restart()
        return len(peers)

    async def end_sessions(self, still_admitted: Callable[[Identity], Denied | None]) -> int:
        """End with ERROR every open session whose identity ``still_admitted`` refuses now; return how many.

        A credential is checked at HELLO; a token revoked or expired since
        must not keep a connected producer writing. Each ending is a
        refusal like a HELLO's (counted, logged).
        """
        ended = 0
        for peer in list(self._sessions):
            denied = None if peer.identity is None else still_admitted(peer.identity)
            if denied is not None:
                await peer.fail(str(denied))
                ended += 1
        return ended

    def _log_end(self, peer: WorkerPeer, ended: SessionEnded) -> None:
        """One line per session end; a refusal (ERROR either way) as a warning, counted by kind."""
        state = self._sessions.get(peer)
        who = state if state is not None else (
            connector_name(peer.program_name, peer.instance_name) if peer.program_name else "a connector"
        )  # fmt: skip
        info = {"connector": who, "remote": peer.remote, "reason": ended.reason}
        if self._stream_refused.pop(peer, None) == ended.reason:  # counted and logged with its stream
            logger.info("session ended: %s from %s by its stream's refusal", who, peer.remote,
                        extra=fields(event="session_ended", **info))  # fmt: skip
        elif ended.origin in ("local", "peer"):
            text = "%s from %s ended its session with ERROR: %s" if ended.origin == "peer" else "refused %s from %s: %s"
            self.refusals.refused(refusal_kind(ended), peer.remote, text, who, peer.remote, ended.reason,
                                  event="session_refused", connector=who, reason=ended.reason)  # fmt: skip
        elif state is not None:
            logger.info("session ended: %s from %s: %s", who, peer.remote, ended.reason,
                        extra=fields(event="session_ended", **info))  # fmt: skip
        else:
            logger.info("connection from %s ended before HELLO: %s", peer.remote, ended.reason,
                        extra=fields(event="connection_ended", **info))  # fmt: skip

    def _forget(self, peer: WorkerPeer) -> None:
        connector = self._sessions.pop(peer, None)
        self._stream_refused.pop(peer, None)
        self.writer.forget(peer)
        self.credits.left(peer)
        if connector is not None:
            self.acks.left(peer, connector)
        self.counters.sessions = len(self._sessions)

    async def _on_notified(self, peer: WorkerPeer, event: StreamNotified) -> None:
        state = self._sessions.get(peer)
        if state is None:
            return  # a refusal ended the session while this NOTIFY (of the same payload) waited
        identity = peer.identity
        denied = None if identity is None else identity.check_notify(event.stream_id, event.stream_name)
        if denied is not None:
            await self._refuse_stream(peer, state, event.stream_id, str(denied))
            return
        # the stream's owner: a token's or certificate's subject; anonymous sessions (the cookie) are not checked
        owner = "" if identity is None or identity.method is Method.ANONYMOUS else identity.subject
        try:
            # The stream's files are created on the log's I/O thread; this
            # session waits for them (the loop and other sessions do not).
            await asyncio.wrap_future(
                self.log.open_stream(
                    event.stream_id,
                    event.stream_name,
                    state,
                    mode=event.mode,
                    point_of_reference=event.point_of_reference,
                    owner=owner,
                )
            )
        except LogError as exc:  # e.g. the stream belongs to another connector or identity: a refusal
            await self._refuse_stream(peer, state, event.stream_id, str(exc))
            return
        except OSError as exc:  # e.g. out of descriptors: the producer should come back, not give up
            logger.warning("stream %d of %s: cannot create its files (%s); asking it to reconnect",
                           event.stream_id, state, exc)  # fmt: skip
            if exc.errno in (errno.ENOSPC, errno.EDQUOT) and self._no_room_for_streams is None:
                self._no_room_for_streams = (f"no room for stream {event.stream_id}'s files: {exc}", time.monotonic())
            await peer.restart()
            return
        self._no_room_for_streams = None
        if event.stream_id not in self.backlog:
            self.backlog.move(event.stream_id, complete=0, committed=0)

    async def _refuse_stream(self, peer: WorkerPeer, connector: str, stream_id: int, reason: str) -> None:
        """Refuse one NOTIFYed stream with ``reason``: counted by kind, logged (rate-limited), told the connector.

        The connector's wire can refuse a stream only by ERROR ``stream N
        refused: REASON``, which ends the session and tells the connector to
        come back without that stream (:mod:`aqueduct.connector.stream_refusal`);
        Wallaroo v3's refuses that stream alone (:meth:`WorkerPeer.refuse_stream`).
        Either way it is one refusal.
        """
        kind = refusal_kind(SessionEnded(reason, "local"))
        identity = str(peer.identity)
        self._stream_refused[peer] = stream_refusal(stream_id, reason)
        self.refusals.refused(
            kind, peer.remote, "refused stream %d of %s (%s) from %s: %s", stream_id, connector, identity,
            peer.remote, reason, event="stream_refused", connector=connector, identity=identity,
            stream_id=stream_id, reason=reason,
        )  # fmt: skip
        await peer.refuse_stream(stream_id, reason)

    async def _on_messages(self, peer: WorkerPeer, event: RecordsAccepted) -> None:
        if peer not in self._sessions:
            return  # the session failed while this batch was in flight
        try:
            self.writer.append(peer, event.records)
        except LogError as exc:  # e.g. an id beyond Spark's signed 64-bit range
            await peer.fail(str(exc))

    # ------------------------------------------------------------ group commit

    async def run(self) -> None:
        """Group-commit loop: runs until cancelled (a commit in flight is finished first).

        The writer says when each group commit is due (its pacing, and its
        retries while the disk is full: the log holds the refused group).
        """
        while True:
            await self.writer.next_group()
            with contextlib.suppress(LogFull):
                await self.group_commit()

    async def group_commit(self) -> dict[int, int]:
        """Make everything buffered durable (one group commit), then return the credits it earned.

        Returns the new durable end offset of each stream the group touched.
        Cancelled while the log's thread works, it still waits for it and
        hands out the credits before re-raising.
        """
        done = await self.writer.commit()
        if done.nbytes:  # the disk took these records: it has room for a stream's files too
            self._no_room_for_streams = None
        for sid in done.ends:
            self.backlog.move(sid, complete=self.log.complete_offset(sid))
        self.credits.made_durable(done.earned, done.nbytes)
        self.acks.release()
        if done.cancelled:
            raise asyncio.CancelledError
        return done.ends

    @property
    def disk_full(self) -> tuple[str, float] | None:
        """Why the log's disk has no room, and since when (``time.monotonic()``); None while writes succeed.

        Either group commits wait for space (they retry, credits are held),
        or a new stream's files could not be made (its producer was asked
        to reconnect): a disk already full when a stream opens, with no
        group commit pending to find it so.
        """
        return self.writer.disk_full or self._no_room_for_streams

    @property
    def buffered(self) -> int:
        """Records in memory not yet durable (bounded by the sessions' credits)."""
        return self.writer.buffered

    @property
    def lag(self) -> int:
        """Records in complete epochs that Spark has not committed yet."""
        return self.backlog.lag

    @property
    def connected(self) -> set[str]:
        """The connectors (program/instance) with a session open now."""
        return set(self._sessions.values())

    # ------------------------------------------------------------ Spark side

    def committed_offsets(self) -> dict[int, int]:
        """Per stream, the log offset below which Spark has committed everything."""
        return self.backlog.committed_offsets()

    def complete_offsets(self) -> dict[int, int]:
        """Per stream, the end of its last complete epoch (what a query may read)."""
        return self.backlog.complete_offsets()

    def on_committed(self, positions: Mapping[int, int]) -> None:
        """Every query that drives acks committed each record below ``positions`` in its sink (see :mod:`.acks`)."""
        self.acks.on_committed(positions)

    async def acks_settled(self) -> None:
        """Until every ACK decided so far is recorded and sent (see :meth:`.Acks.settled`): before the log closes."""
        await self.acks.settled()

    def truncate_below(self, positions: Mapping[int, int]) -> None:
        """Let the log drop segments below ``positions``, never above what was acked (see :mod:`.acks`)."""
        self.acks.truncate_below(positions)
