"""The way back to producers: every ACK frame leaves from here, and what the log may drop.

Everything a connector hears after its OK goes out through this room:
credits earned by group commits, and points of reference once the sink
committed their records. Both ride the same ACK frame, so a session
visited here gets its points and its credits in one
(:meth:`Acks.release`).

* **Exactly-once acks.** :meth:`Acks.on_committed` is called with the
  per-stream log offsets of the last micro-batch Spark committed in its
  sink (the minimum over the queries that drive acks, see
  :mod:`aqueduct.bridge.storage.consumers`). Each connector then gets an ACK with
  the points of reference covering those offsets, once ``acked.json``
  records the offsets durably: a restarted bridge starts from that file,
  so no connector is ever told a lower point than before (the commit
  files it also reads trail Spark by a micro-batch).
* **One target per connector.** A connector's acks go to its newest open
  session; a new session is told at once what was already committed, and
  when the target ends they move to the connector's other session.
* **Truncation.** :meth:`Acks.truncate_below` lets the log drop segments
  no registered consumer needs (unless retention keeps them), never above
  what was acked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from concurrent.futures import Future

from aqueduct.bridge.ingest.backlog import Backlog
from aqueduct.bridge.ingest.counters import IngestCounters
from aqueduct.bridge.ingest.credits import Credits
from aqueduct.bridge.storage.acked import restore_acked
from aqueduct.bridge.storage.commits import acks_for
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.worker.server import WorkerPeer

logger = logging.getLogger(__name__)


def _report_failed_write(done: Future[object]) -> None:
    """Log a failed trim or acked-file write (it costs disk or a stale status, never a record)."""
    if not done.cancelled() and done.exception() is not None:
        logger.error("the log's I/O thread failed to trim or record acks: %r", done.exception())


class Acks:
    """ACK frames to the sessions (points and credits), after group commits and sink commits."""

    def __init__(
        self,
        durable_log: DurableLog,
        backlog: Backlog,
        credits: Credits,
        sessions: Mapping[WorkerPeer, str],
        counters: IngestCounters,
    ) -> None:
        self.log = durable_log
        self._backlog = backlog
        self._credits = credits
        self._sessions = sessions  # the open sessions and their connectors (the ingest's, read only here)
        self.counters = counters
        #: connector -> its open sessions, oldest HELLO first (usually one; two while it
        #: reconnects); its acks go to the newest (:meth:`_ack_target`)
        self._connector_sessions: dict[str, list[WorkerPeer]] = {}
        #: stream -> offset whose point connectors may be told: durable in acked.json
        self._acked: dict[int, int] = {}
        #: stream -> point computed for an ACK, sent once acked.json holds its offset
        self._unsent: dict[int, int] = {}
        self._ack_writes: set[asyncio.Task[None]] = set()
        self._acks_unrecorded = False  # acked.json could not be written: said once
        self._truncated: dict[int, int] = {}  # stream -> offset last asked to truncate below
        acked = restore_acked(self.log.path)
        for sid in self.log.stream_ids():
            committed = max(self.log.snapshot(sid).earliest, min(acked.get(sid, 0), self.log.durable_end(sid)))
            backlog.move(sid, complete=self.log.complete_offset(sid), committed=committed)
            self._acked[sid] = committed

    # ------------------------------------------------------------ sessions

    def joined(self, peer: WorkerPeer, connector: str, grant: int) -> None:
        """A session of ``connector`` started: it is the connector's ack target now.

        It is told at once what the sink already committed, then granted
        ``grant`` credits of a shared budget.
        """
        self._connector_sessions.setdefault(connector, []).append(peer)
        self._ack_committed(peer, connector)
        if grant:
            self.counters.credits_granted += grant
            peer.grant_credits(grant)

    def _ack_committed(self, peer: WorkerPeer, connector: str) -> None:
        """Tell a session what Spark already committed of its connector's streams.

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

    def left(self, peer: WorkerPeer, connector: str) -> None:
        """A session ended: if the connector's acks went to it, they go to its other session now.

        A connector that gave up on an attempt (no OK in time) reconnects at
        once, and the bridge may read the abandoned attempt's HELLO after the
        new one's: the dead session then receives the acks until its end is
        read. Dropping the connector's ack target at that point (as this did)
        left the live session without acks for good; so the acks move to the
        remaining session, with everything committed so far.
        """
        sessions = self._connector_sessions.get(connector, [])
        was_target = bool(sessions) and sessions[-1] is peer
        if peer in sessions:
            sessions.remove(peer)
        if not sessions:
            self._connector_sessions.pop(connector, None)
        elif was_target:
            self._ack_committed(sessions[-1], connector)

    def _ack_target(self, connector: str) -> WorkerPeer | None:
        """The session a connector's acks go to: its newest open one."""
        sessions = self._connector_sessions.get(connector)
        return sessions[-1] if sessions else None

    # ------------------------------------------------------------ sending

    def release(self, points_by_connector: Mapping[str, list[tuple[int, int]]] | None = None) -> None:
        """Send sessions their points and, unless the backlog is too long, their credits.

        Only the sessions concerned are visited (those owed credits, those
        short of credits under a budget, the owners of new points): this
        runs after every group commit, and a bridge holds thousands of
        mostly idle sessions.
        """
        points_by_connector = points_by_connector or {}
        concerned = self._credits.concerned()
        concerned.update(peer for c in points_by_connector if (peer := self._ack_target(c)) is not None)
        for peer in concerned:
            credits = self._credits.take(peer)
            if credits is None:
                continue
            connector = self._sessions[peer]
            points = points_by_connector.get(connector, []) if self._ack_target(connector) is peer else []
            if credits or points:
                self.counters.credits_granted += credits
                peer.ack(points, credits)
        self._credits.count_withheld()

    # ------------------------------------------------------------ sink commits

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
            if sid in self._backlog and offset > self._backlog.committed(sid)  # a stream of this log
        }
        # (the log's own view: Spark may read a group the log published before its commit() resumed here)
        beyond = {sid: offset for sid, offset in advanced.items() if offset > self.log.complete_offset(sid)}
        if beyond:  # Spark reads complete epochs only: such a position is no commit of it
            logger.error("ignoring committed positions beyond the log's complete epochs: %s", beyond)
            advanced = {sid: offset for sid, offset in advanced.items() if sid not in beyond}
        self._unsent.update(acks_for(self.log, advanced))
        for sid, offset in advanced.items():
            self._backlog.move(sid, committed=offset)
        self.release()  # the backlog shrank: credits need not wait for the file
        if advanced or (self._unsent and not self._ack_writes):  # new points, or a failed write's
            committed = self._backlog.committed_offsets()
            written = self.log.write_acked(committed)
            task = asyncio.ensure_future(self._send_acks(written, committed, dict(self._unsent)))
            self._ack_writes.add(task)
            task.add_done_callback(self._ack_writes.discard)

    async def settled(self) -> None:
        """Until every ACK decided so far is recorded and sent (or its write failed).

        A stop closes the log only after this: an ACK whose ``acked.json``
        write finishes after the close would find the log's streams gone.
        """
        while self._ack_writes:
            await asyncio.gather(*self._ack_writes, return_exceptions=True)

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
        self.release(points_by_connector)

    def truncate_below(self, positions: Mapping[int, int]) -> None:
        """Let the log drop segments below ``positions``, never above what was acked.

        An acked point of reference is read from the record before the
        acked offset, so that record must stay until the ack moved on.
        """
        for sid, offset in positions.items():
            bound = min(offset, self._backlog.committed(sid))
            if bound > self._truncated.get(sid, 0) and sid in self._backlog:
                self._truncated[sid] = bound
                self.log.truncate(sid, bound).add_done_callback(_report_failed_write)
