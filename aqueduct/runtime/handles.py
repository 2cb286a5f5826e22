"""Public channel handles: :class:`Sender`, :class:`Receiver`, their oneshot twins.

A pair made by :func:`channel` starts *local*: the sender appends straight
into the receiver's buffer (no encoding, values passed by reference). When
one half is sent inside a message on a networked channel it *migrates*:
the half that stays becomes *networked* on that connection and from then on
talks through the sans-IO core (via the :class:`Link` the connection's
driver implements). Handles that arrive inside received messages are
networked from birth.

Topology rules, enforced before anything is sent (``LocalProtocolError``):

* a handle can be sent away once (afterwards it is *gone*);
* a networked handle cannot be sent anywhere: if it was received from a
  connection that would be bunny-hopping (its other half is remote already),
  and if its other half was sent away both halves would be remote;
* both halves of one local pair cannot go in the same message.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Protocol

from aqueduct.proto.errors import (
    Cancelled,
    ChannelOutcome,
    LocalProtocolError,
    ReceiverClosed,
)
from aqueduct.proto.sender import Mode
from aqueduct.runtime.headers import Headers, HeadersLike, normalize_headers
from aqueduct.runtime.payload import encode_value

DEFAULT_CAPACITY = 128
"""Messages a local pair buffers before ``send()`` waits for the receiver."""
_FAILED = object()  # marks a queue entry whose value is the error to raise


class Finished(Exception):  # noqa: N818 - the protocol's name for the normal end
    """``recv()`` after the sender finished and every message was read.

    Not an :class:`~aqueduct.proto.errors.AqueductError`: finishing is the
    normal end of a channel, and ``async for`` simply stops.
    """


@dataclass(frozen=True, slots=True)
class Message:
    """A received message: the decoded value, its headers and the handles it carried."""

    value: Any
    headers: Headers = ()
    attachments: tuple[Sender | Receiver, ...] = ()


@dataclass(frozen=True, slots=True)
class AttachmentOut:
    """A handle being attached to an outgoing message, as the driver needs it."""

    chanid: int
    headers: Headers


class Link(Protocol):
    """What a networked handle needs from its connection (implemented by the driver)."""

    content_type: bytes
    """The default content type this side announced (messages of it need no header)."""

    def new_channel(self, sender_is_local: bool, oneshot: bool) -> int: ...
    def register(self, chanid: int, handle: Sender | Receiver) -> None: ...
    def dropped(self, chanid: int) -> None:
        """The handle of ``chanid`` was garbage-collected (may run in any thread)."""
    def send_message(
        self, chanid: int, payload: bytes, headers: Headers, attachments: tuple[AttachmentOut, ...]
    ) -> bool:
        """Hand a message to the core; False means the sender's queue is full (wait)."""
    def send_bytes(self, chanid: int, value: bytes) -> bool:
        """``send_message`` of raw bytes without headers or attachments (the bulk case)."""
    def send_blocked(self, chanid: int) -> bool:
        """The sender's local queue is full: a send() must wait before adding to it."""
    def set_mode(self, chanid: int, mode: Mode) -> None: ...
    def finish(self, chanid: int) -> None: ...
    def cancel(self, chanid: int) -> None: ...
    def close_receiver(self, chanid: int) -> None: ...
    def dequeued(self, chanid: int, nbytes: int) -> None: ...
    def channel_stats(self, chanid: int) -> dict[str, Any]: ...
    @property
    def connection(self) -> Any: ...


@dataclass(eq=False)
class _Pair:
    """Shared state of a channel while both halves live in this process."""

    capacity: int
    oneshot: bool
    headers: Headers
    sender: Sender = field(init=False)
    receiver: Receiver = field(init=False)
    space: asyncio.Event = field(default_factory=asyncio.Event)


class _Handle:
    """State common to both halves: local pair, or (link, chanid), or gone."""

    _kind = "handle"

    def __init__(self, pair: _Pair | None, headers: Headers) -> None:
        self._pair = pair
        self._link: Link | None = None
        self._chanid: int | None = None
        self._received = False  # arrived from a connection (never local)
        self._gone = False  # sent away inside a message
        self.headers = headers  # per-channel headers, sent with the attachment

    # -- topology ---------------------------------------------------------
    def _check_usable(self) -> None:
        if self._gone:
            raise LocalProtocolError(f"this {self._kind} was sent away and can no longer be used")

    def _check_attachable(self, others: list[_Handle]) -> None:
        """Raise unless this handle may ride in an outgoing message with ``others``."""
        if self._gone:
            raise LocalProtocolError(
                f"this {self._kind} was already sent away; a handle can be attached once"
            )
        if self._link is not None:
            if self._received:
                raise LocalProtocolError(
                    f"this {self._kind} was received from a connection; its other half is "
                    "remote, so it cannot be sent on (no bunny-hopping)"
                )
            raise LocalProtocolError(
                f"the other half of this {self._kind}'s channel was already sent away; "
                "both halves of a channel cannot be remote"
            )
        if isinstance(self, Sender) and (self._finished or self._cancelled or self._failure):
            raise LocalProtocolError("a finished, cancelled or failed Sender cannot be sent away")
        if isinstance(self, Receiver) and self._closed:
            raise LocalProtocolError("a closed Receiver cannot be sent away")
        assert self._pair is not None
        for other in others:
            if other._pair is self._pair:
                raise LocalProtocolError(
                    "both halves of one channel cannot be sent away (in one message or not)"
                )

    def _networked(self, link: Link, chanid: int, received: bool) -> None:
        self._pair = None
        self._link = link
        self._chanid = chanid
        self._received = received
        link.register(chanid, self)  # type: ignore[arg-type]
        # A networked handle the application drops while its channel is open
        # releases the channel (a Sender cancels, a Receiver closes), so the
        # peer is not left waiting and neither core keeps the state forever.
        weakref.finalize(self, link.dropped, chanid).atexit = False

    def __repr__(self) -> str:
        if self._gone:
            where = "sent away"
        elif self._link is not None:
            where = f"chanid={self._chanid}" + (" received" if self._received else "")
        else:
            where = "local"
        return f"<{self._kind} {where}>"

    @property
    def is_networked(self) -> bool:
        """True once this handle talks to a peer over a connection."""
        return self._link is not None

    @property
    def connection(self) -> Any:
        """The :class:`~aqueduct.runtime.endpoints.Connection` this handle uses (None if local)."""
        return None if self._link is None else self._link.connection

    def stats(self) -> dict[str, Any]:
        """Counters of this channel (the core's, when networked)."""
        if self._link is not None and self._chanid is not None:
            return self._link.channel_stats(self._chanid)
        return self._local_stats()

    def _local_stats(self) -> dict[str, Any]:
        return {"networked": False}


class Sender(_Handle):
    """The sending half of a channel."""

    _kind = "Sender"

    def __init__(self, pair: _Pair | None, headers: Headers = ()) -> None:
        super().__init__(pair, headers)
        self._mode = Mode.ORDERED
        self._started = False
        self._finished = False
        self._cancelled = False
        self._failure: ChannelOutcome | None = None
        # send() calls waiting for room: several tasks may share one Sender,
        # and every one of them must be woken (or failed) by the driver.
        self._window_waiters: list[asyncio.Future[None]] = []
        self._finish_done: asyncio.Future[None] | None = None
        self._sent = 0
        # The last networked send left the core's queue not full, and nothing
        # ended the channel since (finish, cancel and failures clear it).
        self._room = False
        self._owns_connection: Any = None  # set on the entrypoint Sender that connect() returns

    # -- mode ---------------------------------------------------------------
    def _set_mode(self, mode: Mode) -> Sender:
        self._check_usable()
        if self._started and mode is not self._mode:
            raise LocalProtocolError("the delivery mode must be chosen before the first send")
        self._mode = mode
        if self._link is not None:
            self._link.set_mode(self._chanid, mode)  # type: ignore[arg-type]
        return self

    def unordered(self) -> Sender:
        """Deliver messages as they arrive (one QUIC stream per message); returns self."""
        return self._set_mode(Mode.UNORDERED)

    def unreliable(self) -> Sender:
        """Send messages as QUIC datagrams (may be lost, never late-delivered); returns self."""
        return self._set_mode(Mode.UNRELIABLE)

    @property
    def mode(self) -> Mode:
        return self._mode

    # -- sending --------------------------------------------------------------
    async def send(
        self,
        value: Any,
        headers: HeadersLike = None,
        attachments: Sequence[Sender | Receiver] = (),
    ) -> None:
        """Send ``value`` (any CBOR-able value, raw bytes, handles anywhere inside).

        ``attachments`` are handles to attach without referencing them from
        the value (the only way to attach to a raw-bytes message); they come
        first in the receiver's ``Message.attachments``, in order. Waits while
        the channel's buffer (local pair) or send window (networked) is full.
        Raises :class:`ReceiverClosed` once the receiver closed, and the
        channel's outcome (``LostInTransit``, ``ConnectionLost``) if it failed.
        """
        if self._room and headers is None and not attachments and type(value) is bytes:
            # The bulk case, in one call to the driver: raw bytes with nothing
            # attached on a networked channel that is open and has room.
            link = self._link
            assert link is not None and self._chanid is not None
            self._sent += 1
            self._room = link.send_bytes(self._chanid, value)
            if not self._room and self._mode is not Mode.UNRELIABLE:
                await self._wait_window()
            return
        self._check_sendable()
        hdrs = normalize_headers(headers)
        extra = tuple(attachments)
        for handle in extra:
            if not isinstance(handle, _Handle):
                raise TypeError(f"attachments must be Senders or Receivers, got {type(handle).__name__}")
        self._started = True
        while self._pair is not None:
            receiver = self._pair.receiver
            if receiver._closed:
                raise ReceiverClosed("the receiver closed the channel")
            if len(receiver._items) < self._pair.capacity:
                self._sent += 1
                receiver._push(Message(value, hdrs, extra), 0)
                return
            self._pair.space.clear()
            await self._pair.space.wait()
            self._check_sendable()
        if self._mode is not Mode.UNRELIABLE:
            # Never add to a queue that is already full (another task's send()
            # may be waiting on it): wait for room first, so the bound holds.
            # (Skipped while the last send left room: only a send fills it.)
            link = self._link
            assert link is not None and self._chanid is not None
            while not self._room and link.send_blocked(self._chanid):
                await self._wait_window()
                self._check_sendable()
        self._room = self._send_networked(value, hdrs, extra)
        if not self._room and self._mode is not Mode.UNRELIABLE:
            await self._wait_window()

    def _check_sendable(self) -> None:
        self._check_usable()
        if self._failure is not None:
            raise self._failure.with_traceback(None)
        if self._finished:
            raise LocalProtocolError(f"send() on a {self._kind} after finish()")
        if self._cancelled:
            raise LocalProtocolError(f"send() on a {self._kind} after cancel()")

    def _send_networked(self, value: Any, headers: Headers, extra: tuple[_Handle, ...] = ()) -> bool:
        """Encode and hand to the core; False if the core's queue is full (wait)."""
        link = self._link
        assert link is not None and self._chanid is not None
        attached: list[_Handle] = []

        def attach(obj: object) -> int:
            if not isinstance(obj, _Handle):
                raise TypeError(f"{type(obj).__name__} is neither CBOR-encodable nor a channel handle")
            for i, seen in enumerate(attached):
                if seen is obj:
                    return i
            obj._check_attachable(attached)
            attached.append(obj)
            return len(attached) - 1

        for handle in extra:
            attach(handle)
        payload, codec_headers = encode_value(value, attach, link.content_type)
        refs: list[AttachmentOut] = []
        moves: list[Callable[[], None]] = []
        for handle in attached:
            chanid, move = _migrate(handle, link)
            refs.append(AttachmentOut(chanid, handle.headers))
            if move is not None:
                moves.append(move)
        self._sent += 1
        ok = link.send_message(self._chanid, payload, codec_headers + headers, tuple(refs))
        for move in moves:  # messages queued in a local pair follow their receiver
            move()
        return ok

    async def _wait_window(self) -> None:
        """Wait for the driver's next "window opened" (or the channel's failure)."""
        waiter = asyncio.get_running_loop().create_future()
        self._window_waiters.append(waiter)
        try:
            await waiter
        finally:
            self._window_waiters.remove(waiter)

    async def finish(self) -> None:
        """Declare the last message sent; the receiver's iteration ends after it.

        On a networked channel this waits until the peer has received every
        message and the finish (so closing the connection right after loses
        nothing); it raises the channel's outcome if that never happens.
        """
        self._check_sendable()
        self._finished = True
        self._room = False
        if self._pair is not None:
            self._pair.receiver._end(Finished())
            return
        assert self._link is not None and self._chanid is not None
        self._finish_done = asyncio.get_running_loop().create_future()
        self._link.finish(self._chanid)
        await self._finish_done

    def cancel(self) -> None:
        """Abandon the channel: undelivered messages are dropped, the receiver sees Cancelled."""
        self._check_usable()
        if self._finished or self._cancelled or self._failure is not None:
            return
        self._cancelled = True
        self._room = False
        if self._pair is not None:
            self._pair.receiver._cancel()
        else:
            assert self._link is not None and self._chanid is not None
            self._link.cancel(self._chanid)
        self._wake(LocalProtocolError("the Sender was cancelled"))

    # -- driver callbacks -----------------------------------------------------
    def _finish_confirmed(self) -> None:
        """The receiver got everything up to the finish and closed the channel."""
        if self._finish_done is not None and not self._finish_done.done():
            self._finish_done.set_result(None)

    def _window_opened(self) -> None:
        for waiter in self._window_waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _fail(self, outcome: ChannelOutcome) -> None:
        """The channel ended under us (receiver closed, lost, connection gone)."""
        if self._failure is None:
            self._failure = outcome
        self._room = False
        self._wake(outcome)

    def _wake(self, exc: Exception) -> None:
        for waiter in (*self._window_waiters, self._finish_done):
            if waiter is not None and not waiter.done():
                waiter.set_exception(exc)
        if self._pair is not None:
            self._pair.space.set()

    def _local_stats(self) -> dict[str, Any]:
        return {"networked": False, "sent": self._sent, "mode": self._mode.value}

    async def __aenter__(self) -> Sender:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Finish on a clean exit, cancel on an exception; close the connection if it is ours."""
        try:
            if not self._gone and not (self._finished or self._cancelled or self._failure):
                if exc is None:
                    await self.finish()
                else:
                    self.cancel()
        finally:
            if self._owns_connection is not None:
                await self._owns_connection.close()


class Receiver(_Handle):
    """The receiving half of a channel: ``async for value in rx`` or ``await rx.recv()``.

    Its queue holds ``(value, cost, full)`` entries: ``full`` is the whole
    :class:`Message` when the message has headers or attachments, ``None``
    for a plain value (no object beyond the value is built per message:
    ``async for`` on a busy channel only needs values), and ``_FAILED`` when
    ``value`` is the error to raise in its place. ``cost`` is what dequeuing
    it returns to the sender's window; consumed costs are summed and handed
    to the connection once per burst of reads.
    """

    _kind = "Receiver"

    def __init__(self, pair: _Pair | None, headers: Headers = ()) -> None:
        super().__init__(pair, headers)
        self._items: deque[tuple[Any, int, Message | object | None]] = deque()
        self._outcome: Exception | None = None
        self._closed = False
        self._waiter: asyncio.Future[None] | None = None
        self._received_count = 0
        self._consumed = 0  # costs of dequeued messages not yet handed to the link

    # -- reading ----------------------------------------------------------------
    async def recv_message(self) -> Message:
        """The next :class:`Message`; raises :class:`Finished` or the channel's outcome at the end."""
        value, _, full = await self._take()
        return Message(value) if full is None else full  # type: ignore[return-value]

    async def recv(self) -> Any:
        """The next message's value (see :meth:`recv_message`)."""
        return (await self._take())[0]

    async def _take(self) -> tuple[Any, int, Message | object | None]:
        """The next entry, waiting for one; raises a failed message's error."""
        while True:
            entry = self._next()
            if entry is None:
                await self._wait()
                continue
            if entry[2] is _FAILED:
                raise entry[0]
            return entry

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._values()

    async def _values(self) -> AsyncIterator[Any]:
        # _take's loop, inline: awaiting _take() would build a coroutine per
        # message, a visible share of a busy receiver's time.
        next_entry = self._next
        while True:
            try:
                entry = next_entry()
            except Finished:
                return
            if entry is None:
                await self._wait()
                continue
            if entry[2] is _FAILED:
                raise entry[0]
            yield entry[0]

    async def messages(self) -> AsyncIterator[Message]:
        """Iterate :class:`Message` objects (value plus headers and attachments)."""
        while True:
            try:
                yield await self.recv_message()
            except Finished:
                return

    def _next(self) -> tuple[Any, int, Message | object | None] | None:
        """Dequeue the next entry; None when the caller must wait; raises at the end."""
        self._check_usable()
        if self._closed:
            raise LocalProtocolError("recv() on a closed Receiver")
        items = self._items
        if items:
            entry = items.popleft()
            self._received_count += 1
            if self._pair is not None:
                self._pair.space.set()
            elif entry[1]:
                if not self._consumed:
                    asyncio.get_running_loop().call_soon(self._hand_over_consumed)
                self._consumed += entry[1]
            return entry
        if self._outcome is not None:
            # Raised again on every later call: drop the old traceback each time.
            raise self._outcome.with_traceback(None)
        return None

    def _hand_over_consumed(self) -> None:
        """Report this burst's dequeued bytes (DEQUEUED credit, attachment tracking)."""
        consumed, self._consumed = self._consumed, 0
        if consumed and self._link is not None:
            self._link.dequeued(self._chanid, consumed)  # type: ignore[arg-type]

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def close(self) -> None:
        """Stop receiving: buffered messages are dropped and further sends fail with ReceiverClosed."""
        self._check_usable()
        if self._closed:
            return
        self._closed = True
        self._items.clear()
        if self._pair is not None:
            sender = self._pair.sender
            sender._fail(ReceiverClosed("the receiver closed the channel"))
        elif self._outcome is None:
            assert self._link is not None and self._chanid is not None
            self._link.close_receiver(self._chanid)
        self._wake()

    # -- delivery (local sender or driver) ----------------------------------------
    def _push(self, message: Message, cost: int) -> None:
        if self._closed or self._outcome is not None:
            return
        if message.headers or message.attachments:
            self._items.append((message.value, cost, message))
        else:
            self._items.append((message.value, cost, None))
        self._wake()

    def _push_failure(self, error: Exception, cost: int) -> None:
        """A message that could not be decoded: ``recv`` raises ``error`` in its place."""
        if self._closed or self._outcome is not None:
            return
        self._items.append((error, cost, _FAILED))
        self._wake()

    def _push_values(self, values: list[Any], costs: list[int]) -> None:
        """Plain messages (no headers, no attachments), in order."""
        if self._closed or self._outcome is not None:
            return
        self._items.extend(zip(values, costs, repeat(None)))
        self._wake()

    def _end(self, outcome: Exception) -> None:
        """No more messages after the buffered ones; then ``outcome`` is raised."""
        if self._outcome is None:
            self._outcome = outcome
        self._wake()

    def _cancel(self) -> None:
        self._items.clear()
        self._end(Cancelled("the sender cancelled the channel"))

    def _fail(self, outcome: ChannelOutcome) -> None:
        """Lost in transit: fail at once (buffered messages cannot be trusted to matter)."""
        self._items.clear()
        self._end(outcome)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _local_stats(self) -> dict[str, Any]:
        return {"networked": False, "received": self._received_count, "buffered": len(self._items)}


class OneshotSender(Sender):
    """Sends exactly one message, then the channel is finished."""

    _kind = "OneshotSender"

    def _set_mode(self, mode: Mode) -> Sender:
        # Refused up front, even while the pair is local: accepting a mode here
        # would only fail later, in the middle of sending the Receiver away
        # (the core refuses modes on oneshot channels), after the channel was
        # allocated.
        if mode is not Mode.ORDERED:
            raise LocalProtocolError(
                "a oneshot channel carries a single message and has no delivery modes"
            )
        return super()._set_mode(mode)

    async def send(
        self,
        value: Any,
        headers: HeadersLike = None,
        attachments: Sequence[Sender | Receiver] = (),
    ) -> None:
        if self._started:
            raise LocalProtocolError("a oneshot channel carries a single message; send() was called twice")
        await super().send(value, headers, attachments)
        if self._failure is None and not self._cancelled:
            await self.finish()


class OneshotReceiver(Receiver):
    """Receives at most one message: ``value = await orx.recv()``."""

    _kind = "OneshotReceiver"


def _migrate(handle: _Handle, link: Link) -> tuple[int, Callable[[], None] | None]:
    """Turn a local pair networked because ``handle`` is being sent on ``link``.

    Returns the new chanid and, when the Receiver went away, a callable that
    moves the messages already buffered locally onto the network (to run
    after the attaching message was handed to the core, so it goes first).
    """
    pair = handle._pair
    assert pair is not None
    sender, receiver = pair.sender, pair.receiver
    sending_receiver = handle is receiver
    chanid = link.new_channel(sender_is_local=sending_receiver, oneshot=pair.oneshot)
    handle._pair = None
    handle._gone = True
    if not sending_receiver:
        receiver._networked(link, chanid, received=False)
        return chanid, None
    queued = [full if isinstance(full, Message) else Message(value) for value, _, full in receiver._items]
    receiver._items.clear()
    sender._networked(link, chanid, received=False)
    if sender._mode is not Mode.ORDERED:
        link.set_mode(chanid, sender._mode)
    receiver._wake()
    pair.space.set()  # a send() blocked on the local buffer retries on the network

    def move() -> None:
        for item in queued:
            sender._send_networked(item.value, item.headers, item.attachments)
        if sender._finished:
            link.finish(chanid)
        elif sender._cancelled:
            link.cancel(chanid)

    return chanid, move


def channel(capacity: int = DEFAULT_CAPACITY, headers: HeadersLike = None) -> tuple[Sender, Receiver]:
    """A new local channel pair; send either half inside a message to network it.

    ``capacity`` bounds the local buffer (``send()`` waits when it is full);
    ``headers`` are per-channel headers the peer sees as ``handle.headers``.
    """
    return _make_pair(Sender, Receiver, capacity, False, headers)


def oneshot(headers: HeadersLike = None) -> tuple[OneshotSender, OneshotReceiver]:
    """A pair that carries exactly one message (e.g. a reply)."""
    return _make_pair(OneshotSender, OneshotReceiver, 1, True, headers)


def _make_pair(sender_cls: type, receiver_cls: type, capacity: int, is_oneshot: bool, headers: HeadersLike) -> Any:
    if capacity < 1:
        raise ValueError(f"channel capacity must be at least 1, got {capacity}")
    hdrs = normalize_headers(headers)
    pair = _Pair(capacity, is_oneshot, hdrs)
    pair.sender = sender_cls(pair, hdrs)
    pair.receiver = receiver_cls(pair, hdrs)
    return pair.sender, pair.receiver
