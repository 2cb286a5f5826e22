"""Public channel handles: :class:`Sender`, :class:`Receiver`, their oneshot twins, and their two backends.

A handle runs on a backend. A pair made by :func:`channel` starts on a
:class:`LocalPipe`: the sender appends straight into the receiver's
:class:`~aqueduct.runtime.delivery.Inbox` (no encoding, values passed by
reference). When one half is sent inside a message on a networked channel,
the pipe *networks* the half that stays: it moves to a
:class:`NetworkedChannel` on that connection and from then on talks
through the sans-IO core (via the :class:`Link` the connection's driver
implements). Handles that arrive inside received messages are networked
from birth (:func:`networked_handle`).

Whatever feeds a handle speaks the delivery protocol of
:mod:`aqueduct.runtime.delivery` (a Receiver's ``inbox``, a Sender's
``gate``), the local pipe as much as the driver; the driver calls nothing
else of a handle beyond the functions at the end of this module.

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
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aqueduct.proto.errors import LocalProtocolError, ReceiverClosed
from aqueduct.runtime.delivery import FAILED, Finished, Inbox, SendGate
from aqueduct.runtime.headers import Headers, HeadersLike, normalize_headers
from aqueduct.runtime.payload import encode_bytes, encode_value
from aqueduct.wire.modes import Mode

DEFAULT_CAPACITY = 128
"""Messages a local pair buffers before ``send()`` waits for the receiver."""


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
    """What a networked handle needs from its connection (implemented by :class:`~aqueduct.runtime.handle_link.HandleLink`)."""

    content_type: bytes
    """The default content type this side announced (messages of it need no header)."""

    def new_channel(self, sender_is_local: bool, oneshot: bool) -> int: ...
    def register(self, chanid: int, handle: Sender | Receiver) -> None: ...
    def dropped(self, chanid: int) -> None:
        """The handle of ``chanid`` was garbage-collected (may run in any thread)."""
    def send(
        self, chanid: int, payloads: Sequence[bytes], headers: Headers, attachments: tuple[AttachmentOut, ...]
    ) -> tuple[int, bool]:
        """Hand messages to the core: how many were taken (the first always; fewer than all: the
        queue is full), and whether the sender has room for more (False: wait for the window).
        ``attachments`` go on a run of one only."""
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


SEND_RUN = 256
"""Messages ``Sender.send_many`` hands to the core in one step at most."""


def _chunked(values: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """``values`` in lists of ``size`` (the last one shorter); ``itertools.batched`` is 3.12+."""
    chunk: list[Any] = []
    for value in values:
        chunk.append(value)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class LocalPipe:
    """Both halves of a pair in this process: a handle's local backend."""

    def __init__(self, capacity: int, oneshot: bool, headers: Headers) -> None:
        self.capacity = capacity
        self.oneshot = oneshot
        self.headers = headers
        self.space = asyncio.Event()  # set when the receiver took a message (or the pipe ended)
        self.finished = False
        self.cancelled = False
        self.sender: Sender
        self.receiver: Receiver

    def offer(self, message: Message) -> bool:
        """Queue ``message`` for the receiver; False when its buffer is full (wait for ``space``)."""
        inbox = self.receiver.inbox
        if inbox.closed:
            raise ReceiverClosed("the receiver closed the channel")
        if len(inbox.items) < self.capacity:
            inbox.message_arrived(message, 0)
            return True
        self.space.clear()
        return False

    def finish(self) -> None:
        self.finished = True
        self.receiver.inbox.ended(Finished())

    def cancel(self) -> None:
        self.cancelled = True
        self.receiver.inbox.cancelled()
        self.space.set()  # a send() waiting for room sees the cancel

    def close_receiver(self) -> None:
        self.receiver.inbox.close()
        self.sender.gate.failed(ReceiverClosed("the receiver closed the channel"))
        self.space.set()

    def network(self, moving: _Handle, link: Link) -> tuple[int, Callable[[], None] | None]:
        """``moving`` is being sent on ``link``: the half that stays becomes networked there.

        Returns the new chanid and, when the Receiver went away, a callable
        that moves the messages already buffered here onto the network (to
        run after the attaching message was handed to the core, so it goes
        first).
        """
        sender, receiver = self.sender, self.receiver
        sending_receiver = moving is receiver
        chanid = link.new_channel(sender_is_local=sending_receiver, oneshot=self.oneshot)
        moving._sent_away()
        if not sending_receiver:
            receiver._network(link, chanid, received=False)
            return chanid, None
        inbox = receiver.inbox
        queued = [full if isinstance(full, Message) else Message(value) for value, _, full in inbox.items]
        inbox.items.clear()
        channel = sender._network(link, chanid, received=False)
        if sender.mode is not Mode.ORDERED:
            channel.set_mode(sender.mode)
        inbox.wake()  # a recv() waiting on the Receiver that left learns it is gone
        self.space.set()  # a send() blocked on the local buffer retries on the network

        def move() -> None:
            for item in queued:
                channel.send(item.value, item.headers, item.attachments)
            if self.finished:
                channel.finish()
            elif self.cancelled:
                channel.cancel()

        return chanid, move


class NetworkedChannel:
    """A handle's networked backend: channel ``chanid`` of a connection, through its :class:`Link`."""

    __slots__ = ("link", "chanid")

    def __init__(self, link: Link, chanid: int) -> None:
        self.link = link
        self.chanid = chanid

    def send_bytes(self, values: Sequence[bytes]) -> tuple[int, bool]:
        """Raw bytes, nothing attached (the bulk case): how many were taken, and whether room is left.

        It skips the handle's attachment machinery and the general codec, a
        visible share of a busy sender's time per small message. The headers
        depend only on the content type, so a run shares them.
        """
        link = self.link
        content_type = link.content_type
        if len(values) == 1:
            payload, headers = encode_bytes(values[0], content_type)
            return link.send(self.chanid, (payload,), headers, ())
        headers = encode_bytes(b"", content_type)[1]
        return link.send(self.chanid, [encode_bytes(value, content_type)[0] for value in values], headers, ())

    def send(self, value: Any, headers: Headers, extra: tuple[_Handle, ...] = ()) -> bool:
        """Encode (networking the local handles inside) and hand to the core; False: wait for room."""
        link = self.link
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
            chanid, move = handle._send_away_on(link)
            refs.append(AttachmentOut(chanid, handle.headers))
            if move is not None:
                moves.append(move)
        room = link.send(self.chanid, (payload,), codec_headers + headers, tuple(refs))[1]
        for move in moves:  # messages queued in a local pair follow their receiver
            move()
        return room

    def blocked(self) -> bool:
        return self.link.send_blocked(self.chanid)

    def set_mode(self, mode: Mode) -> None:
        self.link.set_mode(self.chanid, mode)

    def finish(self) -> None:
        self.link.finish(self.chanid)

    def cancel(self) -> None:
        self.link.cancel(self.chanid)

    def close_receiver(self) -> None:
        self.link.close_receiver(self.chanid)

    def dequeued(self, nbytes: int) -> None:
        self.link.dequeued(self.chanid, nbytes)

    def stats(self) -> dict[str, Any]:
        return self.link.channel_stats(self.chanid)


def _release_dropped(dropped: weakref.WeakMethod[Callable[[int], None]], chanid: int) -> None:
    """A networked handle was garbage-collected: its link releases the channel, if the link still lives.

    The finalizer holds the link only weakly. Holding ``link.dropped``
    itself kept every connection's driver alive forever through the
    finalizer registry (the driver holds its entrypoint handle, whose
    finalizer held the driver): each closed connection leaked its driver,
    core and QUIC connection.
    """
    method = dropped()
    if method is not None:
        method(chanid)


class _Handle:
    """State common to both halves: a backend (local pipe or networked channel), or gone."""

    _kind = "handle"
    #: releases the channel when the application drops this networked handle (see _network)
    _release_on_drop: weakref.finalize | None = None

    def __init__(self, channel: LocalPipe | NetworkedChannel | None, headers: Headers) -> None:
        self._channel = channel  # None once sent away
        self._received = False  # arrived from a connection (never local)
        self.headers = headers  # per-channel headers, sent with the attachment

    def dropped_unread(self) -> None:
        """Delivery protocol: the message carrying this handle was dropped unread, its Receiver closed.

        The connection's close of that Receiver ends the channels of the
        messages it drops as the spec says: those acked as the application
        would (a cancel or a close), those it nacks lost for the peer.
        Releasing the handle on its own would cancel a channel the close
        makes lost, and the peer would see Cancelled instead of
        LostInTransit; so it is not released when dropped.
        """
        if self._release_on_drop is not None:
            self._release_on_drop.detach()

    # -- topology ---------------------------------------------------------
    def _check_usable(self) -> None:
        if self._channel is None:
            raise LocalProtocolError(f"this {self._kind} was sent away and can no longer be used")

    def _check_attachable(self, others: list[_Handle]) -> None:
        """Raise unless this handle may ride in an outgoing message with ``others``."""
        channel = self._channel
        if channel is None:
            raise LocalProtocolError(
                f"this {self._kind} was already sent away; a handle can be attached once"
            )
        if isinstance(channel, NetworkedChannel):
            if self._received:
                raise LocalProtocolError(
                    f"this {self._kind} was received from a connection; its other half is "
                    "remote, so it cannot be sent on (no bunny-hopping)"
                )
            raise LocalProtocolError(
                f"the other half of this {self._kind}'s channel was already sent away; "
                "both halves of a channel cannot be remote"
            )
        self._check_ended_for_attaching()
        for other in others:
            if other._channel is channel:
                raise LocalProtocolError(
                    "both halves of one channel cannot be sent away (in one message or not)"
                )

    def _check_ended_for_attaching(self) -> None:
        """Raise if this half ended in a way that forbids sending it away."""

    def _send_away_on(self, link: Link) -> tuple[int, Callable[[], None] | None]:
        """This local handle rides in a message on ``link``: its pipe networks the other half."""
        pipe = self._channel
        assert isinstance(pipe, LocalPipe)
        return pipe.network(self, link)

    def _sent_away(self) -> None:
        self._channel = None

    def _network(self, link: Link, chanid: int, received: bool) -> NetworkedChannel:
        channel = self._channel = NetworkedChannel(link, chanid)
        self._received = received
        link.register(chanid, self)  # type: ignore[arg-type]
        # A networked handle the application drops while its channel is open
        # releases the channel (a Sender cancels, a Receiver closes), so the
        # peer is not left waiting and neither core keeps the state forever.
        release = self._release_on_drop = weakref.finalize(
            self, _release_dropped, weakref.WeakMethod(link.dropped), chanid
        )
        release.atexit = False
        return channel

    def __repr__(self) -> str:
        channel = self._channel
        if channel is None:
            where = "sent away"
        elif isinstance(channel, NetworkedChannel):
            where = f"chanid={channel.chanid}" + (" received" if self._received else "")
        else:
            where = "local"
        return f"<{self._kind} {where}>"

    @property
    def is_networked(self) -> bool:
        """True once this handle talks to a peer over a connection."""
        return isinstance(self._channel, NetworkedChannel)

    @property
    def connection(self) -> Any:
        """The :class:`~aqueduct.runtime.endpoints.Connection` this handle uses (None if local)."""
        channel = self._channel
        return channel.link.connection if isinstance(channel, NetworkedChannel) else None

    def stats(self) -> dict[str, Any]:
        """Counters of this channel (the core's, when networked)."""
        channel = self._channel
        if isinstance(channel, NetworkedChannel):
            return channel.stats()
        return self._local_stats()

    def _local_stats(self) -> dict[str, Any]:
        return {"networked": False}


class Sender(_Handle):
    """The sending half of a channel."""

    _kind = "Sender"

    def __init__(self, channel: LocalPipe | NetworkedChannel | None, headers: Headers = ()) -> None:
        super().__init__(channel, headers)
        self.gate = SendGate()  # where send() and finish() wait; the far side reports here
        self._mode = Mode.ORDERED
        self._started = False
        self._finished = False
        self._cancelled = False
        self._sent = 0
        self._owns_connection: Any = None  # set on the entrypoint Sender that connect() returns

    # -- mode ---------------------------------------------------------------
    def _set_mode(self, mode: Mode) -> Sender:
        self._check_usable()
        if self._started and mode is not self._mode:
            raise LocalProtocolError("the delivery mode must be chosen before the first send")
        self._mode = mode
        channel = self._channel
        if isinstance(channel, NetworkedChannel):
            channel.set_mode(mode)
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
        gate = self.gate
        if gate.room and headers is None and not attachments and type(value) is bytes:
            # The bulk case, in one call to the driver: raw bytes with nothing
            # attached on a networked channel that is open and has room.
            self._sent += 1
            gate.room = self._channel.send_bytes((value,))[1]  # type: ignore[union-attr]
            if not gate.room and self._mode is not Mode.UNRELIABLE:
                await gate.wait_window()
            return
        self._check_sendable()
        hdrs = normalize_headers(headers)
        extra = tuple(attachments)
        for handle in extra:
            if not isinstance(handle, _Handle):
                raise TypeError(f"attachments must be Senders or Receivers, got {type(handle).__name__}")
        self._started = True
        channel = self._channel
        while isinstance(channel, LocalPipe):
            if channel.offer(Message(value, hdrs, extra)):
                self._sent += 1
                return
            await channel.space.wait()
            self._check_sendable()
            channel = self._channel  # the receiver may have been sent away meanwhile
        assert isinstance(channel, NetworkedChannel)
        if self._mode is not Mode.UNRELIABLE:
            # Never add to a queue that is already full (another task's send()
            # may be waiting on it): wait for room first, so the bound holds.
            # (Skipped while the last send left room: only a send fills it.)
            while not gate.room and channel.blocked():
                await gate.wait_window()
                self._check_sendable()
        self._sent += 1
        gate.room = channel.send(value, hdrs, extra)
        if not gate.room and self._mode is not Mode.UNRELIABLE:
            await gate.wait_window()

    async def send_many(self, values: Iterable[Any]) -> int:
        """Send every value of ``values`` in order, as ``send()`` would each; how many were sent.

        One call for a batch. On an open networked channel, consecutive raw
        ``bytes`` go to the core as runs (up to ``SEND_RUN`` at a time, each
        in one call, ``Link.send``: no coroutine or call chain per message,
        and on ORDERED one write), and the wait happens only when the send
        window and the queue behind it are full. Anything else (CBOR values,
        a local pair, a channel that ended) goes through ``send()``, and an
        error is raised as ``send()`` raises it: the values before it were
        sent.
        """
        sent = 0
        gate = self.gate
        for chunk in _chunked(values, SEND_RUN):
            i, end = 0, len(chunk)
            while i < end:
                stop = i
                while stop < end and type(chunk[stop]) is bytes:
                    stop += 1
                if gate.room and stop - i > 1:
                    taken, room = self._channel.send_bytes(chunk[i:stop])  # type: ignore[union-attr]
                    self._sent += taken
                    sent += taken
                    i += taken
                    if not room:  # the queue is full: wait for the window
                        gate.room = False
                        await gate.wait_window()
                    continue
                await self.send(chunk[i])  # one the general way (it waits for room)
                sent += 1
                i += 1
        return sent

    def _check_sendable(self) -> None:
        self._check_usable()
        if self.gate.failure is not None:
            raise self.gate.failure.with_traceback(None)
        if self._finished:
            raise LocalProtocolError(f"send() on a {self._kind} after finish()")
        if self._cancelled:
            raise LocalProtocolError(f"send() on a {self._kind} after cancel()")

    def _check_ended_for_attaching(self) -> None:
        if self._finished or self._cancelled or self.gate.failure is not None:
            raise LocalProtocolError("a finished, cancelled or failed Sender cannot be sent away")

    async def finish(self) -> None:
        """Declare the last message sent; the receiver's iteration ends after it.

        On a networked channel this waits until the peer has received every
        message and the finish (so closing the connection right after loses
        nothing); it raises the channel's outcome if that never happens.
        """
        self._check_sendable()
        self._finished = True
        self.gate.room = False
        channel = self._channel
        if isinstance(channel, LocalPipe):
            channel.finish()
            return
        assert channel is not None
        done = self.gate.expect_finish()
        channel.finish()
        await done

    def cancel(self) -> None:
        """Abandon the channel: undelivered messages are dropped, the receiver sees Cancelled."""
        self._check_usable()
        if self._finished or self._cancelled or self.gate.failure is not None:
            return
        self._cancelled = True
        assert self._channel is not None
        self._channel.cancel()
        self.gate.stop(LocalProtocolError("the Sender was cancelled"))

    def _local_stats(self) -> dict[str, Any]:
        return {"networked": False, "sent": self._sent, "mode": self._mode.value}

    async def __aenter__(self) -> Sender:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Finish on a clean exit, cancel on an exception; close the connection if it is ours."""
        try:
            if self._channel is not None and not (
                self._finished or self._cancelled or self.gate.failure is not None
            ):
                if exc is None:
                    await self.finish()
                else:
                    self.cancel()
        finally:
            if self._owns_connection is not None:
                await self._owns_connection.close()


class Receiver(_Handle):
    """The receiving half of a channel: ``async for value in rx`` or ``await rx.recv()``.

    Messages wait in its ``inbox`` (see :class:`~aqueduct.runtime.delivery.Inbox`).
    Costs of dequeued messages are summed and handed to the connection once
    per burst of reads (what returns the sender's window).
    """

    _kind = "Receiver"

    def __init__(self, channel: LocalPipe | NetworkedChannel | None, headers: Headers = ()) -> None:
        super().__init__(channel, headers)
        self.inbox = Inbox()  # what the far side delivers into
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

    async def recv_many(self, limit: int = 1024) -> list[Any]:
        """The values of every message waiting, at least one and at most ``limit``: ``recv()`` in bulk.

        Waits while nothing is queued, then takes what is there in one
        step, without a wake-up or a coroutine per message. Raises as
        ``recv()`` does (:class:`Finished` at the end, the channel's
        outcome, an undecodable message's error); values queued before an
        undecodable message come first, its error on the next call.
        """
        if limit < 1:
            raise ValueError(f"recv_many: limit must be at least 1, got {limit}")
        value = (await self._take())[0]
        values = [value]
        items = self.inbox.items
        cost = 0
        while items and len(values) < limit and items[0][2] is not FAILED:
            entry = items.popleft()
            values.append(entry[0])
            cost += entry[1]
        if len(values) > 1:
            self._taken(len(values) - 1, cost)
        return values

    async def _take(self) -> tuple[Any, int, Any]:
        """The next entry, waiting for one; raises a failed message's error."""
        while True:
            entry = self._next()
            if entry is None:
                await self.inbox.wait()
                continue
            if entry[2] is FAILED:
                raise entry[0]
            return entry

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._values()

    async def _values(self) -> AsyncIterator[Any]:
        # _take's loop, inline: awaiting _take() would build a coroutine per
        # message, a visible share of a busy receiver's time.
        next_entry = self._next
        wait = self.inbox.wait
        while True:
            try:
                entry = next_entry()
            except Finished:
                return
            if entry is None:
                await wait()
                continue
            if entry[2] is FAILED:
                raise entry[0]
            yield entry[0]

    async def messages(self) -> AsyncIterator[Message]:
        """Iterate :class:`Message` objects (value plus headers and attachments)."""
        while True:
            try:
                yield await self.recv_message()
            except Finished:
                return

    def _next(self) -> tuple[Any, int, Any] | None:
        """Dequeue the next entry; None when the caller must wait; raises at the end."""
        self._check_usable()
        inbox = self.inbox
        if inbox.closed:
            raise LocalProtocolError("recv() on a closed Receiver")
        items = inbox.items
        if items:
            entry = items.popleft()
            self._taken(1, entry[1])
            return entry
        if inbox.outcome is not None:
            # Raised again on every later call: drop the old traceback each time.
            raise inbox.outcome.with_traceback(None)
        return None

    def _taken(self, count: int, cost: int) -> None:
        """``count`` more entries of ``cost`` bytes were dequeued at once (``_next``'s bookkeeping)."""
        self._received_count += count
        channel = self._channel
        if type(channel) is LocalPipe:
            channel.space.set()
        elif cost:
            if not self._consumed:
                asyncio.get_running_loop().call_soon(self._hand_over_consumed)
            self._consumed += cost

    def _hand_over_consumed(self) -> None:
        """Report this burst's dequeued bytes (DEQUEUED credit, attachment tracking)."""
        consumed, self._consumed = self._consumed, 0
        channel = self._channel
        if consumed and isinstance(channel, NetworkedChannel):
            channel.dequeued(consumed)

    async def close(self) -> None:
        """Stop receiving: buffered messages are dropped and further sends fail with ReceiverClosed."""
        self._check_usable()
        inbox = self.inbox
        if inbox.closed:
            return
        channel = self._channel
        if isinstance(channel, LocalPipe):
            channel.close_receiver()
            return
        if inbox.outcome is not None:  # the channel already ended: nothing to close on the wire
            inbox.close()
            return
        assert channel is not None
        for _, _, full in inbox.items:  # dropped unread: the connection's close ends their handles
            if full is not None and full is not FAILED:
                for handle in full.attachments:
                    handle.dropped_unread()
        inbox.close()
        # What was read goes over first: closing nacks everything not
        # acked, and a message already read (maybe carrying a handle the
        # application now uses) must not be reported lost.
        self._hand_over_consumed()
        channel.close_receiver()

    def _check_ended_for_attaching(self) -> None:
        if self.inbox.closed:
            raise LocalProtocolError("a closed Receiver cannot be sent away")

    def _local_stats(self) -> dict[str, Any]:
        return {"networked": False, "received": self._received_count, "buffered": len(self.inbox.items)}


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
        if self.gate.failure is None and not self._cancelled:
            await self.finish()


class OneshotReceiver(Receiver):
    """Receives at most one message: ``value = await orx.recv()``."""

    _kind = "OneshotReceiver"


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
    pipe = LocalPipe(capacity, is_oneshot, hdrs)
    pipe.sender = sender_cls(pipe, hdrs)
    pipe.receiver = receiver_cls(pipe, hdrs)
    return pipe.sender, pipe.receiver


# ---------------------------------------------------------------- for the driver and endpoints


def networked_handle(
    link: Link, chanid: int, *, sending: bool, oneshot: bool = False, headers: Headers = ()
) -> Sender | Receiver:
    """A handle for channel ``chanid`` of ``link`` that arrived from it (attached by the peer,
    or the connection's entrypoint): ``sending`` says which half is ours."""
    if sending:
        handle: Sender | Receiver = (OneshotSender if oneshot else Sender)(None, headers)
    else:
        handle = (OneshotReceiver if oneshot else Receiver)(None, headers)
    handle._network(link, chanid, received=True)
    return handle


def give_connection(entrypoint: Sender, connection: Any) -> None:
    """The entrypoint Sender ``connect()`` returns closes ``connection`` when its ``async with`` ends."""
    entrypoint._owns_connection = connection
