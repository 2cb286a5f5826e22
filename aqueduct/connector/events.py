"""Events the connector session machines report (past tense: what happened).

The worker machine's events are what a durable sink (the bridge's ingest
server) consumes; the connector machine's events drive the client library.
"""

from __future__ import annotations

from dataclasses import dataclass

from aqueduct.connector.batch import MessageBatch
from aqueduct.connector.frames import StreamRef
from aqueduct.wire.modes import Mode


@dataclass(frozen=True, slots=True)
class HelloAccepted:
    """Worker side: a connector passed the handshake and was sent OK."""

    program_name: str
    instance_name: str
    credits: int
    refs: tuple[StreamRef, ...]


@dataclass(frozen=True, slots=True)
class StreamNotified:
    """Worker side: a stream was opened (or re-opened).

    ``point_of_reference`` is where this session resumes the stream: the
    higher of the connector's NOTIFY point and what the worker already holds.
    """

    stream_id: int
    stream_name: str
    point_of_reference: int
    #: how its channel delivers: ORDERED (ids increase; TCP streams too), UNORDERED
    #: (ids consecutive, may arrive out of order) or UNRELIABLE (EPHEMERAL only)
    mode: Mode = Mode.ORDERED


@dataclass(frozen=True, slots=True)
class RecordsAccepted:
    """Worker side: new (deduplicated) records of one stream, in arrival order.

    ``records`` is one :class:`~aqueduct.connector.batch.MessageBatch`
    (columns, no object per record; a run when they are consecutive data
    records, the usual case of a busy stream), which the bridge's ingest
    hands to the log as it is. It is also a sequence of :class:`ConnectorMessage`,
    equal to any other sequence of the same records.

    The sink returns one credit per record (with :meth:`WorkerSession.ack`)
    once they are durable; credits of frames that carry nothing to persist
    (NOTIFY, duplicates) are returned by the session itself.
    """

    stream_id: int
    records: MessageBatch


@dataclass(frozen=True, slots=True)
class SessionAccepted:
    """Connector side: OK arrived with initial credits and the points to resume from."""

    credits: int
    refs: tuple[StreamRef, ...]


@dataclass(frozen=True, slots=True)
class Acked:
    """Connector side: an ACK granted credits and reported committed points."""

    credits: int
    refs: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class NotifyRefused:
    """Connector side: the worker refused one stream the session notified (ERROR ``stream N refused: RULE``).

    The session ends with it (a :class:`SessionEnded` follows), but only
    that stream is given up: the connector reconnects and goes on with the
    others (:mod:`aqueduct.connector.stream_refusal`).
    """

    stream_id: int
    rule: str  #: what refused it, as the worker worded it


@dataclass(frozen=True, slots=True)
class RestartRequested:
    """Connector side: the worker sent RESTART; reconnect and resume."""


@dataclass(frozen=True, slots=True)
class SessionEnded:
    """Either side: the session is over and the transport should close.

    ``origin`` says why: ``"local"`` (we sent ERROR ``reason``), ``"peer"``
    (the peer sent ERROR ``reason``), ``"restart"`` (RESTART sent or
    received) or ``"closed"`` (the transport ended).
    """

    reason: str
    origin: str


WorkerEvent = HelloAccepted | StreamNotified | RecordsAccepted | SessionEnded
ConnectorEvent = SessionAccepted | Acked | NotifyRefused | RestartRequested | SessionEnded
