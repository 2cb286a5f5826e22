"""The connector library: open streams, send messages, survive restarts.

::

    async with Connector("tcp://127.0.0.1:7000", program="orders", instance="p0") as conn:
        stream = await conn.stream(1, "orders/0")
        start = stream.resume_from          # where the worker's durable state ends
        await stream.send(b"payload")       # id auto-increments from there
        await stream.wait_acked(stream.next_id)

One background task owns the connection. It handshakes, re-notifies every
stream from the OK's points of reference and re-sends what they do not cover
(the sans-IO :class:`~aqueduct.connector.outbound.Outbox` plans that), and
after RESTART or a lost connection reconnects with exponential backoff
(given several bridges, it moves to the next instead once its own was not
served for ``move_after`` seconds or refused it as busy: a move is a
reconnect elsewhere, planned the same way). The
first connection retries with the same backoff: a fleet of producers
started before its bridge (or restarted together after an outage) connects
as soon as the bridge answers, and the jitter spreads their attempts so
they do not arrive as one burst. Only ``connect_timeout``, if set, makes
``connect`` give up. The caller never re-sends. ``send`` returns once the message is buffered and
has a credit to go out on; the buffer of unacknowledged messages per stream
is bounded (``max_buffer``) so memory stays bounded when the worker is slow.

``on_delivery`` is confluent-kafka's delivery report: called once per
reliable record, with ``None`` when an ACK says the record is committed
downstream, or with the error when it never will be (the worker refused
the session or the record's stream, or the connector closed first).
``flush(timeout)`` waits for those reports and returns how many records
are still waiting. A refused stream
(:class:`~aqueduct.connector.errors.StreamRefused`) is given up alone: the
connector reconnects at once and goes on with the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from aqueduct.auth.tokens import looks_like_token
from aqueduct.connector.connector_session import ConnectorSession, Outgoing
from aqueduct.connector.errors import (
    ConnectorClosed,
    ConnectorRefused,
    CreditTimeout,
    HandshakeFailed,
    StreamRefused,
    TlsRefused,
    WorkerBusy,
)
from aqueduct.connector.events import Acked, NotifyRefused, SessionAccepted, SessionEnded
from aqueduct.connector.frames import DEFAULT_MAX_FRAME_SIZE, ConnectorMessage
from aqueduct.connector.outbound import ORDERED, UNORDERED, UNRELIABLE, Mode, OutboundStream, Outbox
from aqueduct.connector.producer.bridges import BridgeAddress, bridge_list
from aqueduct.connector.producer.rotation import BridgeRotation
from aqueduct.connector.states import ConnectionState
from aqueduct.runtime.retry_hint import RetryWindow, window_named

__all__ = [
    "ORDERED",
    "UNORDERED",
    "UNRELIABLE",
    "Connector",
    "ConnectorStream",
    "Delivery",
    "DeliveryCallback",
    "Mode",
    "StreamHost",
    "WorkerLink",
]

logger = logging.getLogger(__name__)


MAX_ERRORS = 100
#: default ``max_buffer``: reliable messages a stream keeps until the worker commits them
DEFAULT_MAX_BUFFER = 10_000
#: default ``move_after``: seconds a connector given several bridges waits for its own before moving
DEFAULT_MOVE_AFTER = 3.0


@dataclass(frozen=True, slots=True)
class Delivery:
    """One reliable record as its delivery report names it."""

    stream_id: int
    stream_name: str
    message_id: int
    payload: bytes | None  # None for a BOUNDARY or EOS record
    key: bytes | None


DeliveryCallback = Callable[[Exception | None, Delivery], None]
"""``on_delivery(error, delivery)``: ``error`` is None once the record is committed downstream."""


class WorkerLink(Protocol):
    """One connection to a worker, as the client drives it (opening it may raise :class:`WorkerBusy`)."""

    async def send(self, frames: Sequence[Outgoing]) -> None: ...
    async def receive(self) -> bytes: ...
    async def close(self) -> None: ...


@dataclass
class Stats:
    """Counters for progress reports."""

    sent: int = 0  # MESSAGE frames written (re-sends included)
    connections: int = 0  # successful handshakes
    retries: int = 0  # connection attempts that failed before a handshake (first one included)
    moves: int = 0  # moves to the next bridge of the list (see ``move_after``)
    #: why connections ended, the latest ``MAX_ERRORS`` (a producer may retry for hours)
    errors: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_ERRORS))


class StreamHost(Protocol):
    """What a :class:`ConnectorStream` needs of its connector, and all it may use.

    Room to buffer and credits to go out on, the queue, the one wait, and
    re-opening. :class:`Connector` is the implementation; the checks are
    plain calls so that a record that need not wait costs no coroutine.
    """

    def buffer_room(self, stream: OutboundStream) -> int:
        """Reliable records ``stream`` may still buffer (0 once the connector failed: the wait raises)."""
        ...

    def credit_room(self) -> int:
        """Records the queue takes before a ``send`` must wait for credit (at least one)."""
        ...

    def queue(self, messages: list[ConnectorMessage]) -> bool:
        """Queue one stream's new records; True when the credits cover the whole queue."""
        ...

    async def wait_for_credit(self) -> None:
        """Wait until the credits cover the queue (``credits_timeout``: :class:`CreditTimeout`)."""
        ...

    async def wait_until(self, predicate: Callable[[], bool], timeout: float | None) -> None:
        """Wait until ``predicate()`` holds (or raise the connector's error, or ``TimeoutError``)."""
        ...

    async def stream(self, stream_id: int, name: str, mode: Mode = ORDERED) -> ConnectorStream:
        """NOTIFY (again) and return the stream's handle."""
        ...


class ConnectorStream:
    """A stream handle: ``send`` messages, watch ``acked``."""

    def __init__(self, host: StreamHost, state: OutboundStream) -> None:
        self._host = host
        self._state = state

    @property
    def stream_id(self) -> int:
        return self._state.stream_id

    @property
    def mode(self) -> Mode:
        return self._state.mode

    @property
    def resume_from(self) -> int:
        """Point of reference the latest OK gave (0 for a stream the worker never saw)."""
        return self._state.resume_from or 0

    @property
    def next_id(self) -> int:
        """Id the next ``send`` gets when none is given."""
        return self._state.next_id

    @property
    def acked(self) -> int:
        """Latest committed point of reference: every id below it is safe downstream."""
        return self._state.acked

    @property
    def unacked(self) -> int:
        """Messages buffered until the worker commits them."""
        return len(self._state.unacked)

    async def send(
        self,
        payload: bytes | None = b"",
        *,
        message_id: int | None = None,
        event_time: int | None = None,
        key: bytes | None = None,
        boundary: bool = False,
        eos: bool = False,
        ephemeral: bool | None = None,
        unstable: bool = False,
    ) -> int | None:
        """Send one message; return its id (None for EPHEMERAL).

        The keywords mean what :meth:`ConnectorMessage.build
        <aqueduct.connector.frames.ConnectorMessage.build>` makes of them;
        ``ephemeral`` defaults to True on UNRELIABLE streams. Waits while
        the stream's unacked buffer is full and until a credit is available.
        """
        host, state = self._host, self._state
        if ephemeral is None:
            ephemeral = state.mode is UNRELIABLE
        # The waits are skipped when their condition already holds (the
        # common case, one record at a time): a coroutine and a lambda per
        # record are a visible share of a producer's CPU.
        if not ephemeral and host.buffer_room(state) <= 0:
            await host.wait_until(lambda: host.buffer_room(state) > 0, None)
        if key is None and not (boundary or eos or unstable):  # a data record, the stream builds it
            message = state.make_message(payload, message_id, event_time, ephemeral)
        else:
            message = ConnectorMessage.build(
                state.stream_id,
                payload,
                message_id=state.claim(1, ephemeral, message_id),
                event_time=event_time,
                key=key,
                boundary=boundary,
                eos=eos,
                unstable=unstable,
            )
            state.keep([message])
        if not host.queue([message]):
            await host.wait_for_credit()
        return message.message_id

    async def send_many(
        self, payloads: Sequence[bytes], *, event_times: Sequence[int | None] | None = None
    ) -> list[int] | None:
        """Send data messages with the next ids, in order; return their ids (None for EPHEMERAL).

        As :meth:`send` of each payload (with its ``event_times`` entry),
        in one step per round: the records of a round are built, buffered
        and queued together, and the waits happen once per round rather
        than once per record. A round takes what :meth:`send` would take
        before waiting: up to the room in the unacked buffer
        (``max_buffer``) and in the session's credits (at least one), so
        the waits, a ``CreditTimeout`` and what a lost connection drops are
        those of sending each. That is the producer's side of a busy
        stream; keys, boundaries, EOS and explicit ids go through
        :meth:`send`. The ids are the stream's next ones, unless another
        task sends on the stream while this one waits.
        """
        if event_times is not None and len(event_times) != len(payloads):
            raise ValueError(f"{len(event_times)} event times for {len(payloads)} payloads")
        host, state = self._host, self._state
        ephemeral = state.mode is UNRELIABLE
        ids: list[int] = []
        done = 0
        while done < len(payloads):  # bounded: every round queues at least one record
            if not ephemeral and host.buffer_room(state) <= 0:
                await host.wait_until(lambda: host.buffer_room(state) > 0, None)
            room = host.credit_room()
            if not ephemeral:
                room = min(room, host.buffer_room(state))
            upto = done + min(room, len(payloads) - done)
            times = None if event_times is None else event_times[done:upto]
            first = state.next_id
            go_on = host.queue(state.make_messages(payloads[done:upto], times, ephemeral))
            ids.extend(range(first, state.next_id))
            done = upto
            if not go_on:
                await host.wait_for_credit()
        return None if ephemeral else ids

    async def wait_acked(self, point: int, timeout: float | None = None) -> None:
        """Wait until the worker committed every id below ``point`` (a refused stream raises its refusal)."""
        state = self._state
        await self._host.wait_until(lambda: state.acked >= point or state.refused is not None, timeout)
        if state.acked < point and state.refused is not None:
            raise state.refused

    async def reopen(self) -> None:
        """NOTIFY again after EOS (the stream closed)."""
        await self._host.stream(self.stream_id, self._state.stream_name, self._state.mode)


class Connector:
    """A connector: one logical session with a worker, over reconnects (and over bridges, given several)."""

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        program: str = "aqueduct-produce",
        instance: str | None = None,
        cookie: bytes | str = b"",
        token: bytes | str | None = None,
        credits_timeout: float | None = None,
        max_buffer: int = DEFAULT_MAX_BUFFER,
        cafile: str | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
        connect_timeout: float | None = None,
        backoff: tuple[float, float] = (0.05, 5.0),
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        idle_timeout: float = 10.0,
        quic_backend: str = "aioquic",
        on_delivery: DeliveryCallback | None = None,
        retry_permanent_errors: bool = False,
        move_after: float = DEFAULT_MOVE_AFTER,
        replicas: int = 1,
    ) -> None:
        """``url``: the bridge (``tcp://HOST:PORT`` or ``aqueduct://HOST:PORT``),
        or several, as a sequence or one string ``URL,URL,...``; each is checked
        here (a ``ValueError`` names a bad one and its place in the list).
        Given several, the connector serves one at a time, starting with the
        first, and moves to the next (round robin) when its bridge was lost or
        could not be reached for ``move_after`` seconds, or refuses it as busy
        (a bridge being drained); a connection silent for ``move_after`` counts
        as lost (the idle timeout below is cut to it). With one URL,
        ``move_after`` plays no part. ``replicas``: how many of the bridges
        every stream is sent to at once, each over a connection of its own
        (at most one per bridge); a record is done when any of them acks it,
        so losing one costs no stall. ``connect_timeout``: seconds ``connect`` keeps retrying the first connection
        (``None``, the default: until the worker answers or refuses). ``backoff``:
        (first, cap) seconds between attempts, doubled per failure, each delay
        drawn at random between the first and the current step (full jitter).
        ``idle_timeout``: seconds of silence after which the bridge counts as dead
        and the client reconnects: on aqueduct:// always (keep-alive PINGs keep a
        healthy idle connection up, so it only bounds how long a dead bridge goes
        unnoticed); on both transports while waiting for the OK (a worker whose
        listener accepted the connection but never answers it is retried).
        ``quic_backend``: the QUIC stack of aqueduct:// connections,
        ``"aioquic"`` or ``"picoquic"`` (the ``picoquic`` extra); checked here.
        ``certfile``/``keyfile``: the client certificate a worker with mutual
        TLS asks for (aqueduct:// with the aioquic backend, or tcps://; tcp://
        has no TLS). ``cafile`` verifies the worker over aqueduct:// and tcps://.
        ``token``: a signed producer token (``aqueduct token issue``; the
        text of its file, surrounding blanks ignored), sent where the cookie
        goes, for a bridge that checks tokens; give a token or a cookie.
        ``on_delivery``: the delivery report of every reliable record (see the
        module docstring); it runs on the event loop, so it must be quick, and
        an exception it raises is logged, not propagated.
        ``retry_permanent_errors``: retry, with the usual backoff, what is
        otherwise final at once (a refusal by the worker such as a bad cookie, a
        TLS handshake that failed); for a bridge whose cookie or certificate is
        about to be fixed.
        """
        self.bridges = bridge_list(url)
        if not 1 <= replicas <= len(self.bridges):
            given = f"{len(self.bridges)} bridge{'s' if len(self.bridges) != 1 else ''} given"
            raise ValueError(f"replicas must be 1 to the number of bridges ({given}), got {replicas}")
        #: every bridge's URL, separated by commas (one URL: as given)
        self.url = ",".join(b.url for b in self.bridges)
        self.move_after = move_after
        self.program = program
        self.instance = instance if instance is not None else socket.gethostname()
        self.cookie = _credential(cookie, token)
        self.credits_timeout = credits_timeout
        self.max_buffer = max_buffer
        self.cafile = cafile
        self.connect_timeout = connect_timeout
        self.backoff = backoff
        self.max_frame_size = max_frame_size
        self.on_delivery = on_delivery
        self.retry_permanent_errors = retry_permanent_errors
        self.stats = Stats()
        #: every stream, shared by the connections' outboxes
        self._streams: dict[int, OutboundStream] = {}
        #: the connections, ``replicas`` of them; the i-th starts on the i-th bridge
        self._lanes = [_Lane(Outbox(self._streams), BridgeRotation(self.bridges, move_after, 0.0, i)) for i in range(replicas)]
        self._fatal: ConnectorRefused | None = None
        self._closing = False
        self._progress = asyncio.Event()  # set (and replaced) on every state change
        self._undelivered_reported = False  # records left unacked got their error report
        self.idle_timeout = idle_timeout
        #: seconds of silence after which a connection counts as lost (see ``move_after``)
        self._silence = idle_timeout if len(self.bridges) == 1 else min(idle_timeout, move_after)
        #: one opener per bridge, built (and so checked) here; the current one is ``_openers[_at]``
        self._openers = [
            _link_opener(b, cafile, self._mode_of, self._silence, quic_backend, certfile, keyfile, len(self.bridges) > 1)
            for b in self.bridges
        ]

    @property
    def bridge(self) -> str:
        """The URL of the bridge the connector serves (or tries) now (with ``replicas``: the first connection's)."""
        return self._lanes[0].rotation.current.url

    @property
    def serving(self) -> tuple[str, ...]:
        """The URL of the bridge each connection serves (or tries) now, one per replica."""
        return tuple(lane.rotation.current.url for lane in self._lanes)

    # ------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Connector:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Start the connection task and wait for the first handshake.

        Failed attempts are retried with backoff (``stats.retries`` counts
        them); after ``connect_timeout`` seconds without a handshake this
        raises ``ConnectionError`` naming the attempts and the last failure.
        A worker that refuses the session (ERROR) raises ``ConnectorRefused``
        at once: retrying would not help.
        """
        loop = asyncio.get_running_loop()
        for lane in self._lanes:
            lane.runner = loop.create_task(self._run(lane))
        try:
            await self.wait_until(lambda: self.connected, self.connect_timeout)
        except TimeoutError:
            await self.close()
            failed = self.stats.retries
            detail = (
                f"{failed} failed attempt{'s' if failed != 1 else ''}, last: {self.stats.errors[-1]}"
                if failed and self.stats.errors
                else "no answer to the first attempt"
            )
            raise ConnectionError(
                f"no handshake with {self.url} within {self.connect_timeout} s ({detail})"
            ) from None
        except BaseException:
            await self.close()
            raise

    @property
    def connected(self) -> bool:
        """A session is up (with ``replicas``: on at least one connection)."""
        return any(lane.streaming for lane in self._lanes)

    async def close(self, flush_timeout: float = 5.0) -> None:
        """Send what is queued (waiting at most ``flush_timeout``), then disconnect."""
        if all(lane.runner is None for lane in self._lanes):
            return
        if self._fatal is None and self.connected:
            with contextlib.suppress(TimeoutError, ConnectorRefused):
                await self.wait_until(lambda: any(lane.streaming and not lane.outbox for lane in self._lanes), flush_timeout)
        self._closing = True
        for lane in self._lanes:
            if lane.runner is not None:
                lane.runner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await lane.runner
                lane.runner = None
        self._report_undelivered(ConnectorClosed("the connector closed before the worker committed it"))

    async def flush(self, timeout: float | None = None) -> int:
        """Wait up to ``timeout`` seconds until every reliable record is committed; return how many are not.

        0 means every record sent so far was committed downstream (and its
        delivery report made). Unlike :meth:`wait_all_acked`, running out of
        time is no error: the count says what is left, as confluent-kafka's
        ``flush`` does. A worker's refusal raises ``ConnectorRefused`` (the
        records it leaves were reported to ``on_delivery`` with it), and so
        does a refused stream's, once the other streams' records are settled.
        """
        with contextlib.suppress(TimeoutError, ConnectorClosed):
            await self.wait_all_acked(timeout)
        return self.unacked

    @property
    def unacked(self) -> int:
        """Reliable records sent (or queued) that the worker has not committed yet, over all streams."""
        return sum(len(s.unacked) for s in self._streams.values())

    # ------------------------------------------------------------ streams

    async def stream(self, stream_id: int, name: str, mode: Mode = ORDERED) -> ConnectorStream:
        """Open (NOTIFY) a stream, or re-open one closed by EOS; an open stream is returned as is.

        Re-opening waits until the worker acknowledged everything up to the
        EOS: over Aqueduct the new NOTIFY brings a new channel, and a late
        message on the old one must never race the new ones.
        """
        self._raise_if_fatal()
        existing = self._streams.get(stream_id)
        if existing is not None:
            if existing.refused is not None:
                raise existing.refused
            if not existing.closed:
                return ConnectorStream(self, existing)
            await self.wait_until(lambda: not existing.unacked, self.credits_timeout, CreditTimeout)
        first, *others = self._lanes
        state = first.outbox.open(stream_id, name, mode)
        for lane in others:  # a connection not streaming notifies it after its next OK
            if lane.streaming:
                lane.outbox.notify(state, reopened=existing is not None)
        for lane in self._lanes:
            lane.kick.set()
        await self.wait_for_credit()
        return ConnectorStream(self, state)

    async def wait_all_acked(self, timeout: float | None = None) -> None:
        """Wait until every reliable message sent so far is committed by the worker.

        A refused stream's records never will be: once every other stream's
        are, the first refusal (:attr:`refused`) is raised.
        """
        await self.wait_until(
            lambda: all(not s.unacked for s in self._streams.values()), timeout
        )
        refusal = next(iter(self.refused.values()), None)
        if refusal is not None:
            raise refusal

    @property
    def refused(self) -> dict[int, StreamRefused]:
        """The streams the worker refused, by id, with why: given up for good, the others go on."""
        return {sid: s.refused for sid, s in self._streams.items() if s.refused is not None}

    # ------------------------------------------------------------ StreamHost: what stream handles use

    def buffer_room(self, stream: OutboundStream) -> int:
        """Reliable records ``stream`` may still buffer (``max_buffer``); 0 once the connector failed."""
        return 0 if self._fatal is not None else self.max_buffer - len(stream.unacked)

    def credit_room(self) -> int:
        """Records ``send()`` one by one would queue before waiting for credit (at least one)."""
        return max([1] + [lane.session.credits - len(lane.outbox) + 1 for lane in self._lanes if lane.streaming])  # type: ignore[union-attr]

    def queue(self, messages: list[ConnectorMessage]) -> bool:
        """Queue one stream's new records (one from ``send``, a round from ``send_many``) on every session.

        A connection between sessions gets them from its next OK's plan (the
        records are buffered until acked). Returns whether the sender may go
        on at once: no error and credits for everything queued (with
        ``replicas``: on one session, so a dead or slow bridge holds no
        sender back; one whose queue holds more than ``max_buffer`` frames
        beyond its credits is reconnected, to catch up from the records
        still unacked, rather than queue without bound).
        """
        for lane in self._lanes:
            session = lane.session
            if session is not None and session.state is ConnectionState.STREAMING:
                lane.outbox.push(messages)
                lane.kick.set()
                if len(self._lanes) > 1 and len(lane.outbox) > self.max_buffer + session.credits:
                    lane.resync(f"more than max_buffer ({self.max_buffer}) frames behind")
        return self._fatal is None and self._has_credit_for_queue()

    async def wait_for_credit(self) -> None:
        """Wait until the credits cover the queue; ``CreditTimeout`` after ``credits_timeout``."""
        await self.wait_until(self._has_credit_for_queue, self.credits_timeout, CreditTimeout)

    async def wait_until(
        self,
        predicate: Callable[[], bool],
        timeout: float | None,
        error: type[TimeoutError] = TimeoutError,
    ) -> None:
        """Wait until ``predicate()`` holds, re-checked at every change of state.

        Raises the connector's permanent error as soon as there is one,
        ``ConnectorClosed`` once the connection task ended, and ``error``
        after ``timeout`` seconds.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            self._raise_if_fatal()
            if predicate():
                return
            if all(lane.runner is None or lane.runner.done() for lane in self._lanes):
                raise ConnectorClosed("connector is closed")
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise error(f"timed out after {timeout} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), remaining)

    # ------------------------------------------------------------ internals

    def _mode_of(self, stream_id: int) -> Mode:
        stream = self._streams.get(stream_id)
        return stream.mode if stream is not None else ORDERED

    def _has_credit_for_queue(self) -> bool:
        # Once per record sent one by one: a plain loop, no generator.
        for lane in self._lanes:
            session = lane.session
            if session is not None and session.state is ConnectionState.STREAMING and len(lane.outbox) <= session.credits:
                return True
        return False

    def _raise_if_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    def _changed(self) -> None:
        self._progress.set()
        self._progress = asyncio.Event()

    async def _run(self, lane: _Lane) -> None:
        """One connection: connect, serve, reconnect with backoff (or move to the next bridge); ends on fatal errors or close()."""
        loop = asyncio.get_running_loop()
        rotation = lane.rotation
        rotation.served(loop.time())  # its move_after counts from now
        failures = 0
        turn = b""  # the place in the bridge's queue its last refusal gave: kept until a session or a move
        try:
            while not self._closing:
                busy: WorkerBusy | None = None
                try:
                    link = await self._openers[rotation.at](turn)
                except (OSError, ConnectionError, TimeoutError) as exc:
                    if isinstance(exc, HandshakeFailed) and not self.retry_permanent_errors:
                        self._give_up(TlsRefused(str(exc)))
                        return
                    self.stats.errors.append(f"connect: {exc or type(exc).__name__}")
                    self.stats.retries += 1
                    failures += 1
                    busy = exc if isinstance(exc, WorkerBusy) else None
                else:
                    ended, handshaken = await self._serve(lane, link)
                    busy = None if handshaken else _refused_as_busy(ended)
                    if handshaken:
                        turn = b""  # admitted: a later refusal is a new wait
                    if lane.gave_up is not None:  # one stream refused, given up alone: the others go on, at once
                        self.stats.errors.append(ended.reason)
                        rotation.served(loop.time())
                        failures = 0
                        continue
                    if ended.origin in ("peer", "local") and busy is None and not self.retry_permanent_errors:
                        self._give_up(ConnectorRefused(ended.reason))
                        return
                    self.stats.errors.append(ended.reason)
                    if handshaken:
                        rotation.served(loop.time())
                    else:
                        self.stats.retries += 1
                    if ended.origin == "restart":
                        failures = 0
                        continue
                    failures = 1 if handshaken else failures + 1
                if busy is not None and busy.turn:
                    turn = busy.turn  # an attempt that times out after it keeps it: its place is still there
                window = None if busy is None else RetryWindow(busy.retry_not_before, busy.retry_within)
                moved = rotation.failed(loop.time(), window, self.stats.errors[-1], self._taken_by_others(lane))
                if moved is not None:
                    self.stats.moves += 1
                    logger.warning("moved from %s to %s: %s", moved.before.url, moved.after.url, moved.why)
                    failures, turn = 0, b""  # a turn is a place in one bridge's queue
                    await asyncio.sleep(moved.wait)
                    continue
                delay = self._delay(failures)
                if window is not None:  # the worker named a window: jitter inside it
                    named = random.uniform(window.not_before, window.within)
                    # a window with a turn is when that turn comes (kept however often refused): not later
                    delay = named if busy is not None and busy.turn else max(delay, named)
                await asyncio.sleep(min(delay, rotation.time_left(loop.time(), self._taken_by_others(lane))))
        finally:
            lane.session = None
            self._changed()

    def _taken_by_others(self, lane: _Lane) -> frozenset[int]:
        """The bridges the connector's other connections serve (none to move to)."""
        return frozenset(other.rotation.at for other in self._lanes if other is not lane)

    def _refuse_stream(self, lane: _Lane, event: NotifyRefused) -> None:
        """Give up the refused stream for good; each record it leaves is reported with the refusal.

        The lane then comes back at once without it (``lane.gave_up``); the
        session reports only streams it notified, and a refused stream is
        never notified again, so that happens once per stream and connection.
        """
        stream = self._streams[event.stream_id]
        dropped = stream.refuse(event.rule)  # nothing the second time (another connection's refusal)
        lane.gave_up = stream.refused
        if self.on_delivery is not None:
            for record in dropped:
                self._report(stream.refused, stream, record)

    def _give_up(self, error: ConnectorRefused) -> None:
        """A permanent error: every waiting call raises it, every unacked record is reported with it."""
        self._fatal = error
        self._report_undelivered(error)

    def _report_acked(self, event: Acked) -> None:
        """Delivery reports for the records an ACK commits (called before the outbox drops them)."""
        for stream_id, point in event.refs:
            stream = self._streams.get(stream_id)
            if stream is None:
                continue
            for record in stream.unacked:  # ids increase along the buffer
                if record.message_id >= point:  # type: ignore[operator]
                    break
                self._report(None, stream, record)

    def _report_undelivered(self, error: Exception) -> None:
        """Report, once, every record the worker will now never commit."""
        if self.on_delivery is None or self._undelivered_reported:
            return
        self._undelivered_reported = True
        for stream in self._streams.values():
            for record in stream.unacked:
                self._report(error, stream, record)

    def _report(self, error: Exception | None, stream: OutboundStream, record: ConnectorMessage) -> None:
        assert self.on_delivery is not None and record.message_id is not None
        delivery = Delivery(stream.stream_id, stream.stream_name, record.message_id, record.payload, record.key)
        try:
            self.on_delivery(error, delivery)
        except Exception:  # the connection task must outlive a faulty callback
            logger.exception("on_delivery raised for stream %d id %d", stream.stream_id, record.message_id)

    @property
    def resent(self) -> int:
        """Messages re-sent automatically after RESTART or a lost connection (or a move)."""
        return sum(lane.outbox.resent for lane in self._lanes)

    def _delay(self, failures: int) -> float:
        """Capped exponential backoff with full jitter.

        Drawing the whole delay at random (not just a fraction of it) is what
        spreads a fleet that failed together: thousands of producers whose
        bridge came back retry over the whole window instead of in waves.
        """
        low, high = self.backoff
        return random.uniform(low, min(high, low * 2 ** min(failures, 16)))

    async def _serve(self, lane: _Lane, link: WorkerLink) -> tuple[SessionEnded, bool]:
        """Run one session of ``lane`` over ``link`` until it ends; also say whether OK arrived."""
        session = ConnectorSession(self.program, self.instance, self.cookie, self.max_frame_size)
        lane.session, lane.link, lane.resyncing, lane.gave_up = session, link, None, None
        session.start()
        writer = asyncio.get_running_loop().create_task(self._write_loop(lane, session, link))
        ended: SessionEnded | None = None
        handshaken = False
        try:
            try:
                await link.send(session.data_to_send())
            except (OSError, ConnectionError) as exc:  # reset before our HELLO went out: retried
                return SessionEnded(str(exc) or type(exc).__name__, "closed"), False
            while ended is None:
                try:
                    if handshaken:
                        data = await link.receive()
                    else:  # a worker that accepted but never answers (overloaded) is retried
                        data = await asyncio.wait_for(link.receive(), self._silence)
                except TimeoutError:
                    data, reason = b"", f"no OK within {self._silence} s"
                except (OSError, ConnectionError) as exc:
                    data, reason = b"", str(exc) or type(exc).__name__
                else:
                    reason = lane.resyncing or "connection closed"
                events = session.receive_data(data) if data else session.connection_lost()
                for event in events:
                    if isinstance(event, SessionEnded):
                        ended = event if data else SessionEnded(reason, "closed")
                    else:
                        if isinstance(event, SessionAccepted):
                            self.stats.connections += 1
                            handshaken = True
                        elif isinstance(event, Acked) and self.on_delivery is not None:
                            self._report_acked(event)
                        elif isinstance(event, NotifyRefused):
                            self._refuse_stream(lane, event)
                        lane.outbox.apply(event)
                lane.kick.set()
                self._changed()
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError, ConnectionError):
                await writer
            with contextlib.suppress(OSError, ConnectionError):
                out = session.data_to_send()
                if out:
                    await link.send(out)  # our own ERROR, if any
            await link.close()
            lane.session, lane.link = None, None
            self._changed()
        return ended, handshaken

    async def _write_loop(self, lane: _Lane, session: ConnectorSession, link: WorkerLink) -> None:
        while True:
            await lane.kick.wait()
            lane.kick.clear()
            self.stats.sent += lane.outbox.send_into(session)
            frames = session.data_to_send()
            if frames:
                await link.send(frames)
                self._changed()


class _Lane:
    """One of the connector's connections (``replicas`` of them): its queue, its session, its bridge, its task."""

    def __init__(self, outbox: Outbox, rotation: BridgeRotation) -> None:
        self.outbox = outbox  # sharing the connector's streams
        self.rotation = rotation
        self.session: ConnectorSession | None = None
        self.link: WorkerLink | None = None
        self.kick = asyncio.Event()  # wakes the writer
        self.runner: asyncio.Task[None] | None = None
        self.resyncing: str | None = None  # why the session is being ended to catch up
        self.gave_up: StreamRefused | None = None  # the stream the session's end refused (see _refuse_stream)
        self._closing: asyncio.Task[None] | None = None

    @property
    def streaming(self) -> bool:
        return self.session is not None and self.session.state is ConnectionState.STREAMING

    def resync(self, why: str) -> None:
        """End the session (once): the next one's OK plans the re-sends from what is still unacked."""
        if self.link is not None and self.resyncing is None:
            self.resyncing = f"reconnecting: {why}"
            self._closing = asyncio.get_running_loop().create_task(self.link.close())


def _refused_as_busy(ended: SessionEnded) -> WorkerBusy | None:
    """The worker's ERROR to HELLO as :class:`WorkerBusy` when it names a retry window (a draining bridge)."""
    window = window_named(ended.reason) if ended.origin == "peer" else None
    if window is None:
        return None
    return WorkerBusy(ended.reason, window.within, window.not_before)


def _credential(cookie: bytes | str, token: bytes | str | None) -> bytes:
    """What HELLO's cookie field carries: the token if given (checked to be one), else the cookie."""
    if token is None:
        return cookie.encode() if isinstance(cookie, str) else cookie
    if cookie:
        raise ValueError("give a token or a cookie, not both (a bridge checking tokens ignores the cookie)")
    text = (token.encode() if isinstance(token, str) else token).strip()
    if not looks_like_token(text):
        raise ValueError("token: not a producer token (aqt1.<payload>.<signature>, from `aqueduct token issue`)")
    return text


def _link_opener(
    bridge: BridgeAddress,
    cafile: str | None,
    mode_of: Callable[[int], Mode],
    idle_timeout: float,
    quic_backend: str,
    certfile: str | None = None,
    keyfile: str | None = None,
    bounded: bool = False,
) -> Callable[[bytes], Awaitable[WorkerLink]]:
    """Open a link to ``bridge``; what cannot work with these options fails here, not at every retry.

    The opener takes the turn ``bridge`` named when it last refused an
    attempt as busy (``b""``: none; only a QUIC bridge names one).

    ``bounded``: an attempt (a TCP connect, a QUIC handshake) gives up after
    ``idle_timeout`` seconds, as does a TCP connection whose bytes go
    unacknowledged that long: the connector has other bridges to move to.
    """
    host, port, url = bridge.host, bridge.port, bridge.url
    limit = idle_timeout if bounded else None
    if bridge.scheme in ("tcp", "tcps"):
        from aqueduct.connector.producer.tcp_link import TcpLink

        if bridge.scheme == "tcp":
            if certfile is not None:
                raise ValueError(f"a client certificate needs aqueduct:// or tcps:// (tcp:// has no TLS): {url!r}")
            return lambda _turn: TcpLink.open(host, port, limit)
        from aqueduct.connector.tls import client_context

        for what, path in (("cafile", cafile), ("certfile", certfile), ("keyfile", keyfile)):
            if path is not None and not os.path.isfile(path):
                raise FileNotFoundError(f"{what} {path!r}: no such file")
        tls = client_context(cafile, certfile, keyfile)  # read once, here: every reconnect reuses it
        return lambda _turn: TcpLink.open(host, port, limit, tls)
    from aqueduct.connector.producer.aqueduct_link import AqueductLink
    from aqueduct.runtime.endpoints import check_backend

    check_backend(quic_backend)  # a wrong or missing backend fails here, not at every retry
    if cafile is not None and not os.path.isfile(cafile):  # as would a missing CA, at every retry
        raise FileNotFoundError(f"cafile {cafile!r}: no such file")
    return lambda turn: AqueductLink.open(
        host, port, mode_of, cafile, idle_timeout, quic_backend, certfile, keyfile, handshake_timeout=limit, turn=turn
    )
