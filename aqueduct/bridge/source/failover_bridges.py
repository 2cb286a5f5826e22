"""The bridges behind a failover query: their snapshots, which answer, registration and commits.

:class:`FailoverBridges` is what the failover reader (:mod:`.failover`)
knows of its bridges on the driver: the fixed ones (``log``, ``bridge``)
and those of the bridge list (:mod:`.bridge_list`, read again at every
:meth:`FailoverBridges.refresh`); a snapshot of each one's streams; which
answered the last refresh, which are held or left out (:class:`Membership`,
``bridgeTimeout``); and each stream's copies as points (:mod:`.id_space`).
It registers the query's consumer on each bridge and tells each one the
query's commits as its own log offsets (:func:`~.id_space.commit_offset`),
with the records ``failOnDataLoss=false`` skipped. The calls of a refresh
or a commit go to every bridge at once (:mod:`.bridge_calls`): a trigger
waits for the slowest bridge, and a partitioned one costs it at most
``bridgeConnectTimeout`` once its connection is gone. A bridge left out
is still asked at every refresh, to notice when it is back, but in the
background: it costs the triggers nothing.

Which streams it reads: ORDERED ones (a stream's points of reference are
the same records on every bridge only when its ids arrive in order); an
UNORDERED or UNRELIABLE stream the query selects stops it with an error
saying how to leave the stream out (:func:`~.id_space.refused_mode`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import Future

import pyarrow.flight as flight

from aqueduct.bridge.source.bridge_calls import BridgeCalls
from aqueduct.bridge.source.bridge_list import BridgeListError, Membership, read_bridge_list
from aqueduct.bridge.source.clock import Clock
from aqueduct.bridge.source.data_loss import AqueductDataLoss, corruption_is_data_loss
from aqueduct.bridge.source.failover_read import GONE, PlannedCopy, complete_point
from aqueduct.bridge.source.flight_client import (
    BridgeCredentialError,
    RemoteLog,
    RemoteSnapshots,
    log_missed_commit,
    open_bridges,
)
from aqueduct.bridge.source.id_space import (
    BEFORE_ALL,
    Copy,
    commit_offset,
    copy_start,
    holds_stable,
    refused_mode,
)
from aqueduct.bridge.source.log_access import LocalLog, LogAccess, Snapshots
from aqueduct.bridge.source.options import AqueductOptionError, SourceOptions
from aqueduct.bridge.storage.consumers import ConsumerError
from aqueduct.bridge.storage.view import FORMAT_FILE, StreamIndex

__all__ = ["FailoverBridges"]

logger = logging.getLogger(__name__)

#: What a commit to one bridge may fail with while the query goes on: the bridge gone, the consumer
#: dropped there, or an error the bridge answers (its disk full as it writes the commit file). The
#: sink holds the records already; that bridge only acks them later, once a next commit reaches it
#: (offsets are absolute). Stopping the query instead would make one bridge's fault everyone's.
COMMIT_MISSED = (*GONE, ConsumerError, flight.FlightServerError)


def _fixed_bridges(options: SourceOptions) -> dict[str, LogAccess]:
    """The ``log`` and ``bridge`` options' logs by name (one unnamed: named by where it is)."""
    out: dict[str, LogAccess] = {(name or path): LocalLog(path) for name, path in options.logs}
    if options.bridges:
        opened = _open(options, options.bridges)
        out |= {(name or remote.address): remote for name, remote in opened.items()}
    return out


def _open(options: SourceOptions, bridges: tuple[tuple[str | None, str], ...], token: str | None = None,
          ca: str | None = None) -> dict[str | None, RemoteLog]:  # fmt: skip
    """:func:`open_bridges` with the options' credentials, calls bounded by ``bridgeTimeout``.

    Connecting is bounded by ``bridgeConnectTimeout``: a host that drops
    packets (partitioned, not dead) fails a call in that time, not in
    ``bridgeTimeout``. A read does not wait for a bridge that went away to
    come back (``reconnect_window`` 0): the reader goes on at once with
    another copy, and waits for any bridge to hold the records only when
    none does (:func:`~.failover_read.read_piece`). A commit that does not
    reach its bridge raises, so what it carried (skipped records) is sent
    with the next one.
    """
    try:
        opened = open_bridges(
            bridges, token_file=token or options.bridge_token_file, token_env=options.bridge_token_env,
            ca_file=ca or options.bridge_ca, consumer=options.consumer,
        )  # fmt: skip
    except BridgeCredentialError as e:
        raise AqueductOptionError(f"aqueduct source: {e}") from None
    for remote in opened.values():
        remote.call_timeout = options.bridge_timeout
        remote.connect_timeout = options.bridge_connect_timeout
        remote.reconnect_window = 0.0
        remote.quiet_commits = False
    return opened


class FailoverBridges:
    """The query's bridges by name, in preference order (the options' first, then the list's)."""

    def __init__(self, options: SourceOptions, clock: Clock) -> None:
        self.options = options
        self.clock = clock
        self.fixed = _fixed_bridges(options)
        self.logs: dict[str, LogAccess] = dict(self.fixed)
        self.calls = BridgeCalls()
        self._reset()

    def _reset(self) -> None:
        """The driver's caches (not pickled to executors)."""
        self._snapshots: dict[str, Snapshots] = {}
        #: each bridge's last snapshot (a bridge left out: none)
        self.streams: dict[str, dict[int, StreamIndex]] = {}
        self.answered: set[str] = set()  # bridges whose last load answered
        self.membership = Membership(self.options.bridge_timeout)
        self._registered: set[str] = set()
        self._sent: dict[str, dict[int, int]] = {}  # each bridge's last commit
        #: the snapshot and the points each bridge's commit was last worked out from (compared by identity)
        self._told: dict[str, tuple[object, object]] = {}
        #: (bridge, stream id) -> (closed epochs' end offset, last index entry, their point): see complete_point
        self._complete: dict[tuple[str, int], tuple[int, object, int]] = {}
        #: records skipped as lost (failOnDataLoss=false) not yet told to the bridge that holds what follows
        self._skips: dict[str, int] = {}
        self._unstable_warned: set[int] = set()  # streams said to hold no stable record
        #: left-out bridges' visits under way in the background (see _asked_meanwhile)
        self._asking: dict[str, Future[dict[int, StreamIndex] | None]] = {}

    def __getstate__(self) -> dict:
        return {
            "options": self.options,
            "clock": self.clock,
            "fixed": self.fixed,
            "logs": self.logs,
            "calls": self.calls,
        }

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    def _update_list(self) -> None:
        """Read the bridge list again: open the bridges added, forget the ones removed."""
        if self.options.bridge_list is None:
            return
        try:
            entries = read_bridge_list(self.options.bridge_list)
        except BridgeListError as e:
            logger.error("aqueduct source: %s; the bridges listed before stay", e)
            return
        listed = {e.name for e in entries}
        for name in [n for n in self.logs if n not in self.fixed and n not in listed]:
            logger.info("aqueduct source: bridge %s left the bridge list; forgotten", name)
            for table in (self.logs, self._snapshots, self.streams, self._sent, self._told, self._skips, self._asking):
                table.pop(name, None)
            self.answered.discard(name)
            self._registered.discard(name)
            self.membership.forget(name)
        for e in entries:
            if e.name in self.logs:
                continue
            if e.name in self.fixed:
                logger.error(
                    "aqueduct source: the bridge list names %s, also named by an option; left out",
                    e.name,
                )
                continue
            try:
                (remote,) = _open(
                    self.options, ((e.name, e.address),), e.token_file, e.ca_file
                ).values()
            except AqueductOptionError as err:
                logger.error("%s; bridge %s is not read until its list line is fixed", err, e.name)
                continue
            logger.info("aqueduct source: bridge %s (%s) joined the bridge list", e.name, e.address)
            self.logs[e.name] = remote
            self._snapshots.pop(e.name, None)  # a visit still under way when it left may have put one back

    def _load(self, name: str) -> dict[int, StreamIndex] | None:
        """``name``'s streams as of now, None if it cannot be reached (or its log is gone)."""
        access = self.logs[name]
        try:
            if isinstance(access, LocalLog) and not (access.path / FORMAT_FILE).is_file():
                raise FileNotFoundError(f"{access.path} is no longer a log")
            if name not in self._snapshots:
                self._snapshots[name] = access.snapshots(not self.options.fail_on_data_loss)
            snapshots = self._snapshots[name]
            before = getattr(snapshots, "failures", 0)
            streams = snapshots.load()
            if isinstance(snapshots, RemoteSnapshots) and snapshots.failures != before:
                return None
            return streams
        except GONE as e:
            logger.warning("aqueduct source: bridge %s cannot be reached (%s)", name, e)
            self._snapshots.pop(name, None)
            return None

    def refresh(
        self, committed: Mapping[int, int] | None
    ) -> tuple[dict[int, list[Copy]], dict[int, list[Copy]]]:
        """Every stream's copies on the bridges planning reads, and those on bridges held (not read, waited for).

        Every bridge is asked at once (:meth:`_visit`), and waited for but
        those left out (:meth:`_asked_meanwhile`). A bridge answering for the
        first time is registered at ``committed`` (the query's points).
        """
        self._update_list()
        now = self.clock.monotonic()
        loaded = self.calls.each([n for n in self.logs if not self.membership.left_out(n, now)], self._visit)
        for name in self.logs:
            if name not in loaded:
                loaded[name] = self._asked_meanwhile(name)
        self.answered = set()
        for name, streams in loaded.items():
            if streams is None:
                self.membership.failed(name, now)
                self._sent.pop(name, None)  # a commit it missed is sent again when it answers
                self._told.pop(name, None)
                if self.membership.left_out(name, now):
                    self.streams.pop(name, None)
            else:
                self.membership.answered(name)
                self.streams[name] = streams
                self.answered.add(name)
        usable: dict[int, list[Copy]] = {}
        held: dict[int, list[Copy]] = {}
        stable: dict[int, bool] = {}
        reads = self.options.reads
        with corruption_is_data_loss():
            for name, streams in self.streams.items():
                for sid, s in streams.items():
                    if not s.entries or not reads.selects(sid, s.meta.stream_name):
                        continue
                    refused = refused_mode(s.meta.mode)
                    if refused:
                        raise AqueductOptionError(
                            f"aqueduct source: stream {sid} ({s.meta.stream_name!r}, on bridge {name}) is {refused}; "
                            "leave it out of this query (option streams or streamPattern) and read it with "
                            "failover=false"
                        )
                    c = Copy(name, copy_start(s.entries), self.complete_point(name, s))
                    (usable if name in self.answered else held).setdefault(sid, []).append(c)
                    stable[sid] = stable.get(sid, False) or holds_stable(s.entries)
        self._warn_unstable(stable)
        if committed is not None:  # a bridge new to the query joins at its points
            self.calls.each(sorted(self.answered - self._registered), lambda name: self.register(name, committed))
        return usable, held

    def _visit(self, name: str) -> dict[int, StreamIndex] | None:
        """One bridge's part of a refresh: its streams, their ends, and whether it dropped the consumer.

        None: it cannot be reached (then nothing more is asked of it, so a
        partitioned bridge costs one connect timeout). Runs beside the other
        bridges' on :attr:`calls`' threads, so it touches only ``name``'s
        entries of the caches. A bridge that dropped the query's consumer
        no longer keeps its records: that is the query's data loss, as with
        one bridge.
        """
        streams = self._load(name)
        if streams is None or not self._points_known(name, streams):
            return None
        try:
            self.logs[name].check_not_dropped(self.options.consumer)
        except ConsumerError as e:
            raise AqueductDataLoss(f"aqueduct source: bridge {name}: {e}") from None
        except GONE:
            pass  # gone since it answered: the next refresh sees it
        return streams

    def _asked_meanwhile(self, name: str) -> dict[int, StreamIndex] | None:
        """A left-out bridge's streams if the visit an earlier refresh started in the background found it back.

        None otherwise (then a visit starts, unless one is under way): a
        bridge that was left out is asked at every refresh to notice its
        return, without a trigger waiting for a host that drops packets. Its
        streams, a trigger old at most, are a snapshot like any other.
        """
        asking = self._asking.get(name)
        if asking is not None and not asking.done():
            return None
        self._asking.pop(name, None)
        if asking is not None:
            found = asking.result()  # a visit's own errors (a dropped consumer) are the query's
            if found is not None:
                return found
        self._asking[name] = self.calls.start(name, self._visit)
        return None

    def _warn_unstable(self, stable: Mapping[int, bool]) -> None:
        """Say once per stream that one holding records but none with a stable id is not read yet (and why)."""
        for sid, any_stable in stable.items():
            if not any_stable and sid not in self._unstable_warned:
                self._unstable_warned.add(sid)
                logger.warning(
                    "aqueduct source: stream %d holds records but none with a stable id; a failover query reads "
                    "a record without a stable id (EPHEMERAL, UNSTABLE_REFERENCE) with the stable record before "
                    "it, so these wait for the stream's first stable record (a stream that never has one is "
                    "never read with failover: read it with failover=false)",
                    sid,
                )

    def _points_known(self, name: str, streams: dict[int, StreamIndex]) -> bool:
        """Work out the ends of ``name``'s copies (a record lookup each, remembered); False if it went away meanwhile."""
        points: dict[tuple[str, int], tuple[int, object, int]] = {}
        try:
            with corruption_is_data_loss():
                for s in streams.values():
                    if s.entries and self._remembered(name, s) is None:
                        points[(name, s.stream_id)] = (s.complete, s.entries[-1], complete_point(s))
        except GONE as e:
            logger.warning("aqueduct source: bridge %s cannot be reached (%s)", name, e)
            self._snapshots.pop(name, None)
            return False
        # Only a whole snapshot's points replace the remembered ones: a bridge that went away halfway keeps
        # its last snapshot (its copies held), whose points must stay known without asking it again.
        self._complete.update(points)
        return True

    def _remembered(self, name: str, s: StreamIndex) -> int | None:
        """The remembered :func:`complete_point` of ``s``, if its last entry and closed epochs are the same."""
        known = self._complete.get((name, s.stream_id))
        if known is not None and known[0] == s.complete and known[1] is s.entries[-1]:
            return known[2]
        return None

    def complete_point(self, name: str, s: StreamIndex) -> int:
        """:func:`complete_point`, remembered while the stream's last entry and closed epochs stay the same."""
        point = self._remembered(name, s)
        if point is None:
            point = complete_point(s)
            self._complete[(name, s.stream_id)] = (s.complete, s.entries[-1], point)
        return point

    def register(self, name: str, points: Mapping[int, int] | None) -> None:
        """Register the consumer on ``name`` at ``points`` (None: from its earliest records)."""
        try:
            positions = {} if points is None else self.positions(name, points)
            self.logs[name].register(self.options.consumer, positions, self.options.reads)
            self._registered.add(name)
        except (*GONE, ConsumerError) as e:
            logger.warning(
                "aqueduct source: cannot register %r on bridge %s (%s); next trigger",
                self.options.consumer,
                name,
                e,
            )

    def positions(self, name: str, points: Mapping[int, int]) -> dict[int, int]:
        """``points`` as ``name``'s log offsets, for the streams it holds (see :func:`commit_offset`)."""
        out = {}
        streams = self.streams.get(name, {})
        with corruption_is_data_loss():
            for sid, point in points.items():
                s = streams.get(sid)
                if s is None or not s.entries:
                    continue
                offset = commit_offset(s.entries, point, s.reference_at)
                if offset is not None:
                    out[sid] = offset
        return out

    def planned_copies(
        self, starts: Mapping[int, int], ends: Mapping[int, int]
    ) -> dict[int, list[PlannedCopy]]:
        """Copies of the streams that move from ``starts`` to ``ends``, on bridges answering or held (not left out)."""
        copies: dict[int, list[PlannedCopy]] = {}
        with corruption_is_data_loss():
            for name, streams in self.streams.items():
                for sid, s in streams.items():
                    if ends.get(sid, BEFORE_ALL) > starts.get(sid, BEFORE_ALL) and s.entries:
                        c = PlannedCopy.of(name, self.logs[name], s, self.complete_point(name, s))
                        copies.setdefault(sid, []).append(c)
        return copies

    def preference(self) -> list[str]:
        """Bridge names, preferred first: the answering ones in their order, held ones after them."""
        return sorted(self.logs, key=lambda n: n not in self.answered)

    def note_skipped(self, name: str, records: int) -> None:
        """``records`` were skipped as lost before ``name``'s copy: told to it with the next commit it gets."""
        self._skips[name] = self._skips.get(name, 0) + records

    def commit(self, points: Mapping[int, int]) -> None:
        """Tell every answering bridge holding each stream that the query committed it up to ``points``.

        Worked out again only for a bridge whose snapshot or the points
        changed (both compared by identity: the reader hands the same dict
        until the points move), or that has skipped records to hear of, and
        sent only when its offsets moved or it has; to every bridge at once.
        """
        todo = []
        for name in sorted(self.answered):
            known, told = self._told.get(name), (self.streams[name], points)
            if known is not None and known[0] is told[0] and known[1] is told[1] and not self._skips.get(name):
                continue  # the same snapshot and points as last time: nothing new to say
            self._told[name] = told
            todo.append(name)
        for name, outcome in self.calls.each(todo, lambda name: self._tell(name, points)).items():
            if isinstance(outcome, Exception):
                self._told.pop(name, None)  # worked out and sent again next time
                self.answered.discard(name)  # not preferred by the batch planned next
                log_missed_commit(name, outcome, unreachable=isinstance(outcome, GONE))
            elif outcome is not None:
                positions, skipped = outcome
                self._sent[name] = positions
                self._skips[name] = self._skips.get(name, 0) - skipped

    def _tell(self, name: str, points: Mapping[int, int]) -> tuple[dict[int, int], int] | Exception | None:
        """``name``'s commit, run beside the others': the positions and skipped records sent, None if nothing was new."""
        skipped = self._skips.get(name, 0)
        try:
            positions = self.positions(name, points)
            if not positions or (positions == self._sent.get(name) and not skipped):
                return None
            self.logs[name].commit(self.options.consumer, positions, skipped)
            return positions, skipped
        except COMMIT_MISSED as e:
            return e
