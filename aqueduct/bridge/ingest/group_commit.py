"""The group-commit writer: records into the log's buffer, then one group commit for all of them.

Accepted records are appended to the :class:`~aqueduct.bridge.storage.log.DurableLog`
buffer at once; a **group commit** (one fsync for everything buffered
since the last one) makes them durable. This room knows what is in the
buffer and in the group commit in flight (records, their bytes, the
credits each session spent on them) and when to start the next group
(:meth:`GroupCommitWriter.next_group`); what the credits then become is
the :mod:`~aqueduct.bridge.ingest.credits` room's business, told through
the :class:`GroupCommitted` result.

* **Pacing.** Group commits start at least ``group_commit_interval`` apart
  and gather for ``group_commit_delay``: Spark writes to the same disks.
* **A full disk.** A group commit that finds no room (:class:`LogFull`)
  is held by the log and retried with backoff (:data:`FULL_RETRY`); its
  credits go back to the sessions' unsynced count, so producers run out of
  credits and wait, keeping their unacked records, while everything durable
  stays so. It says so once when it starts and once when it ends
  (:attr:`GroupCommitWriter.disk_full`), and goes on by itself when space
  returns.

The writes and fsyncs run on the log's I/O thread while the loop keeps
reading and the next group accumulates; everything else here runs on the
bridge's event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeVar

from aqueduct.bridge.ingest.config import IngestConfig
from aqueduct.bridge.ingest.counters import IngestCounters
from aqueduct.bridge.storage.log import DurableLog, LogFull, RecordRefused
from aqueduct.connector.batch import MessageBatch
from aqueduct.connector.worker.server import WorkerPeer

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: seconds between retries of a group commit the full disk refused: first, factor, most
FULL_RETRY = (0.05, 2.0, 5.0)


@dataclass(frozen=True)
class GroupCommitted:
    """A group commit is done: what became durable, and the credits its records earned back."""

    ends: dict[int, int]  # stream -> its new durable end offset, for each stream the group touched
    earned: dict[WorkerPeer, int]  # credits its records cost, per session (one ended since earns nothing)
    nbytes: int  # payload and key bytes of its records
    cancelled: bool  # a cancellation arrived while the log's thread worked: re-raise it once applied


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


class GroupCommitWriter:
    """The log's write side: appends now, durable at the next group commit."""

    def __init__(self, durable_log: DurableLog, config: IngestConfig, counters: IngestCounters) -> None:
        self.log = durable_log
        self.config = config
        self.counters = counters
        self._unsynced: dict[WorkerPeer, int] = {}  # credits spent on records not yet in a group commit
        self._in_group_commit: dict[WorkerPeer, int] = {}  # credits spent on records of the one in flight
        self._unsynced_bytes = 0  # payload and key bytes appended since the last group commit
        self._dirty = asyncio.Event()
        #: why group commits wait for space, and since when (time.monotonic()); None while they succeed
        self.disk_full: tuple[str, float] | None = None
        self._last = -config.group_commit_interval  # loop time the last group commit started
        self._pause = FULL_RETRY[0]  # before the next retry while the disk is full
        self._committing = 0  # group commits in flight (the log's I/O thread writes them in order)

    def append(self, peer: WorkerPeer, batch: MessageBatch) -> None:
        """Buffer ``peer``'s batch; its credits come back after the next group commit.

        Every message's credit comes back, duplicates included (they cost
        the producer a credit too). Raises :class:`LogError` for a batch the
        log refuses (e.g. an id beyond Spark's signed 64-bit range).
        """
        self._unsynced[peer] = self._unsynced.get(peer, 0) + len(batch)
        self._dirty.set()
        self._unsynced_bytes += batch.payload_bytes()
        self._store(batch)

    def _store(self, batch: MessageBatch) -> None:
        """Buffer a batch in the log, which drops the ids it already holds (the session knows only its own)."""
        try:
            appended = self.log.append(batch)
        except RecordRefused as refused:  # it ends the batch: count what was appended before it
            self.counters.messages += refused.appended.stored
            raise
        self.counters.messages += appended.stored
        self.counters.duplicates += appended.duplicates

    def forget(self, peer: WorkerPeer) -> None:
        """The session ended: its records stay in the group, its credits go nowhere."""
        self._unsynced.pop(peer, None)
        self._in_group_commit.pop(peer, None)

    @property
    def buffered(self) -> int:
        """Records in memory not yet durable (bounded by the sessions' credits)."""
        return sum(self._unsynced.values()) + sum(self._in_group_commit.values())

    @property
    def settled(self) -> bool:
        """Is every record appended so far durable and visible?

        Unlike :attr:`buffered` it does not count per session, so it stays
        true to the log after sessions ended (a draining bridge ends them all
        and must still see their last records through their group commit).
        """
        return not self._dirty.is_set() and not self._committing and self.disk_full is None

    async def next_group(self) -> None:
        """Wait until the next group commit is due.

        Group commits start at least ``group_commit_interval`` apart. While
        the disk is full it is due again after a growing pause, new records
        or not: the log holds the refused group.
        """
        loop = asyncio.get_running_loop()
        first, factor, most = FULL_RETRY
        if self.disk_full is None:
            await self._dirty.wait()
            await asyncio.sleep(max(self.config.group_commit_delay, self._last + self.config.group_commit_interval - loop.time()))
            self._pause = first
        else:
            await asyncio.sleep(self._pause)
            self._pause = min(self._pause * factor, most)
        self._dirty.clear()
        self._last = loop.time()

    async def commit(self) -> GroupCommitted:
        """Make everything buffered durable (one group commit).

        The writes and fsyncs run on the log's I/O thread; records arriving
        meanwhile join the next group. Cancelled while the thread works, it
        still waits for it and says so in the result (``cancelled``), so
        the credits go out before the cancellation goes on. A full disk
        raises :class:`LogFull` once its credits are back with the sessions.
        """
        earned = {peer: n for peer, n in self._unsynced.items() if n}
        for peer, n in earned.items():
            self._unsynced[peer] -= n
            self._in_group_commit[peer] = self._in_group_commit.get(peer, 0) + n
        group_bytes, self._unsynced_bytes = self._unsynced_bytes, 0
        started = time.perf_counter()
        self._committing += 1
        try:
            ends, cancelled = await _outlast_cancel(self.log.start_commit())
        except LogFull as exc:
            self._refused(earned, group_bytes, exc)
            raise
        finally:
            self._committing -= 1
        self.counters.group_commit_seconds.observe(time.perf_counter() - started)
        self.counters.durable_bytes += group_bytes
        if self.disk_full is not None:
            logger.warning("the log's disk has room again: group commits go on (%.1f s without)",
                           time.monotonic() - self.disk_full[1])  # fmt: skip
            self.disk_full = None
        for peer, n in earned.items():
            if peer in self._in_group_commit:  # else the session ended meanwhile
                self._in_group_commit[peer] -= n
        return GroupCommitted(ends, earned, group_bytes, cancelled)

    def _refused(self, earned: dict[WorkerPeer, int], group_bytes: int, exc: LogFull) -> None:
        """A group commit found the disk full: its credits wait for the retry that makes it durable."""
        for peer, n in earned.items():
            if peer in self._in_group_commit:
                self._in_group_commit[peer] -= n
                self._unsynced[peer] += n
        self._unsynced_bytes += group_bytes
        if self.disk_full is None:
            logger.error("%s; no credits are granted until it is durable, retrying", exc)
            self.disk_full = (str(exc), time.monotonic())
