"""Draining a bridge: it takes no new producers, sends its own elsewhere, and exits once nothing it holds is uncommitted.

A bridge's log is a durable buffer, not the only copy: a producer keeps
every record until its ACK, and an ACK means the query committed it. So a
bridge can be retired without losing a record once (1) no producer sends
to it any more and (2) every record it holds that a query can read has
been committed by the consumers it acks for. Draining does exactly that:

* every new HELLO is answered with the busy ERROR :data:`REFUSAL` (its
  retry hint is the one of :mod:`aqueduct.runtime.retry_hint`): a producer
  given several bridges moves on, a producer given only this one comes
  back later (to this bridge restarted, or its replacement at that address);
* every open session ends with RESTART: its connector reconnects at once,
  is refused, and does the same;
* Flight keeps serving, and the consumers' commits keep arriving, until
  :class:`Waiting` says nothing readable is left uncommitted; then the
  bridge exits 0.

Records of an epoch the producer never closed (a BOUNDARY still to come)
are not waited for: no query can read them, and their producer, which was
never acked for them, sends them again to the bridge it moves to.

**The control surface is a file, not a signal.** ``aqueduct-bridge drain
--log DIR`` writes a request in the log directory; the running bridge
looks for it every :data:`POLL` seconds, takes it (removes it) and
answers in a state file, rewritten whenever what it waits for changes
(:mod:`.drain_files`). An operator paged at night knows where the log is (it is in the
unit file, and every other ``aqueduct-bridge`` command takes it); a pid
may belong to a container's namespace, a signal says nothing back, and a
Flight action would need the token. Whether a bridge runs on the
directory is the log's own lock (``LOCK``, flock'ed by its one writer).
A bridge inside a user's Spark job (``SparkBridge``) takes requests too,
but answers each at once with :data:`IN_A_SPARK_JOB` and serves on.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from aqueduct.runtime.retry_hint import RetryWindow, busy_reason

POLL = 0.5
"""Seconds between a bridge's looks for a request, and a draining bridge's looks at what is left."""
#: when a refused producer with no other bridge should come back: a restart takes seconds
DRAIN_WINDOW = RetryWindow(not_before=2.0, within=10.0)
REFUSAL = f"{busy_reason(DRAIN_WINDOW)}; this bridge is draining"
"""The ERROR a draining bridge answers every HELLO with (``busy: retry within 10.00 s, not before 2.00 s; ...``)."""
SHOWN_STREAMS = 5  # streams named on a status line; the rest are counted
IN_A_SPARK_JOB = (
    "the bridge runs inside a Spark job (SparkBridge), which does not drain: stop the job (SIGTERM or Ctrl-C) "
    "instead; its producers keep every record it has not acked and resend it wherever they go next"
)
"""What a :class:`~aqueduct.bridge.app.spark_bridge.SparkBridge` answers a drain request with, at once.

Its bridge is the user's job: once drained, a bridge exits, and only the
job's own code may end the job. Stopping the job is the operator's way,
and loses nothing (the producers hold what it did not ack).
"""


class DrainPhase(Enum):
    """Where a bridge is in its drain: ``serving`` -> ``draining`` -> ``drained``."""

    SERVING = "serving"
    DRAINING = "draining"
    DRAINED = "drained"


@dataclass(frozen=True)
class DrainRequested:
    """An operator's request was taken (a second one while draining changes nothing)."""

    request: str


@dataclass(frozen=True)
class NothingLeft:
    """Every readable record the bridge holds is committed by the consumers it acks for."""


DrainEvent = DrainRequested | NothingLeft

#: (phase, event type) -> next phase; anything else leaves the phase as it is
TRANSITIONS: dict[tuple[DrainPhase, type], DrainPhase] = {
    (DrainPhase.SERVING, DrainRequested): DrainPhase.DRAINING,
    (DrainPhase.DRAINING, DrainRequested): DrainPhase.DRAINING,
    (DrainPhase.DRAINING, NothingLeft): DrainPhase.DRAINED,
}


@dataclass(frozen=True)
class Waiting:
    """What a draining bridge still waits for before it may exit.

    ``streams`` are ``(stream id, records)`` of complete epochs not yet
    committed by every consumer that drives acks, most first;
    ``consumers`` those consumers that are behind; ``unsettled`` says
    records received before the sessions ended are not durable yet.
    """

    records: int
    streams: tuple[tuple[int, int], ...]
    consumers: tuple[str, ...]
    unsettled: bool

    @property
    def nothing(self) -> bool:
        return not self.records and not self.unsettled

    def line(self) -> str:
        """``waiting for 120 records of 2 streams (7: 100, 9: 20) to be committed by default``."""
        if self.nothing:
            return "nothing left uncommitted"
        if not self.records:
            return "waiting for the last records received to be durable"
        shown = ", ".join(f"{sid}: {n:,}" for sid, n in self.streams[:SHOWN_STREAMS])
        more = len(self.streams) - SHOWN_STREAMS
        shown += f", and {more:,} more" if more > 0 else ""
        by = ", ".join(self.consumers) or "a consumer that drives acks (none is live)"
        s = "" if len(self.streams) == 1 else "s"
        return f"waiting for {self.records:,} records of {len(self.streams):,} stream{s} ({shown}) to be committed by {by}"


def waiting(
    complete: Mapping[int, int],
    acked: Mapping[int, int],
    consumers: Mapping[str, Mapping[int, int]],
    settled: bool,
) -> Waiting:
    """What is left: per stream, complete-epoch records beyond the ack frontier ``acked``.

    ``consumers`` are the positions of each live consumer that drives acks
    in the streams it reads (the frontier is their minimum): those short of
    a stream's complete end are named.
    """
    behind = sorted(
        ((sid, end - acked.get(sid, 0)) for sid, end in complete.items() if end > acked.get(sid, 0)),
        key=lambda item: (-item[1], item[0]),
    )
    late = tuple(
        sorted(name for name, at in consumers.items() if any(at.get(sid, end) < end for sid, end in complete.items()))
    )
    return Waiting(sum(n for _, n in behind), tuple(behind), late, not settled)


class Drain:
    """One bridge's drain: its phase, fed :data:`DrainEvent` s; what it waited for last."""

    def __init__(self) -> None:
        self.phase = DrainPhase.SERVING
        self.request: str | None = None
        self.since: float | None = None  # wall time the first request was taken
        self.sessions_ended = 0  # sessions sent elsewhere by RESTART

    def apply(self, event: DrainEvent) -> DrainPhase:
        self.phase = TRANSITIONS.get((self.phase, type(event)), self.phase)
        if isinstance(event, DrainRequested):
            self.request = event.request
            if self.since is None:
                self.since = time.time()
        return self.phase

    @property
    def draining(self) -> bool:
        return self.phase is DrainPhase.DRAINING


def refused_doc(drain: Drain, request: str, why: str) -> dict[str, Any]:
    """What :data:`STATE_FILE` holds after a bridge that does not drain answered ``request``: still serving, and why."""
    return state_doc(drain, None) | {"request": request, "refused": why}


def state_doc(drain: Drain, left: Waiting | None, ended: str | None = None) -> dict[str, Any]:
    """What :data:`STATE_FILE` holds: phase (or how the bridge ended), request, since, what is left."""
    return {
        "state": ended or drain.phase.value,
        "request": drain.request,
        "since": drain.since,
        "sessions_ended": drain.sessions_ended,
        "waiting": None if left is None else asdict(left) | {"line": left.line()},
        "pid": os.getpid(),
    }
