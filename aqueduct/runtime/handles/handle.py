"""What both halves of a channel share: the handle base and its two backends, a local pipe or a networked channel.

A handle runs on a backend. A pair made by :func:`~.pairs.channel` starts on a
:class:`LocalPipe`: the sender appends straight into the receiver's
:class:`~aqueduct.runtime.handles.delivery.Inbox` (no encoding, values passed by
reference). When one half is sent inside a message on a networked channel,
the pipe *networks* the half that stays: it moves to a
:class:`NetworkedChannel` on that connection and from then on talks
through the sans-IO core (via the :class:`Link` the connection's driver
implements). Handles that arrive inside received messages are networked
from birth (:func:`~.pairs.networked_handle`).

Whatever feeds a handle speaks the delivery protocol of
:mod:`aqueduct.runtime.handles.delivery` (a Receiver's ``inbox``, a Sender's
``gate``), the local pipe as much as the driver; the driver calls nothing
else of a handle beyond the functions of :mod:`.pairs`.

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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aqueduct.proto.errors import LocalProtocolError, ReceiverClosed
from aqueduct.runtime.handles.delivery import Finished
from aqueduct.runtime.handles.headers import Headers
from aqueduct.runtime.handles.payload import encode_bytes, encode_value
from aqueduct.wire.modes import Mode

if TYPE_CHECKING:
    from aqueduct.runtime.handles.receiver import Receiver
    from aqueduct.runtime.handles.sender import Sender

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
    """What a networked handle needs from its connection (implemented by :class:`~aqueduct.runtime.driver.handle_link.HandleLink`)."""

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


def chunked(values: Iterable[Any], size: int) -> Iterator[list[Any]]:
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

    def network(self, moving: Handle, link: Link) -> tuple[int, Callable[[], None] | None]:
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

    def send(self, value: Any, headers: Headers, extra: tuple[Handle, ...] = ()) -> bool:
        """Encode (networking the local handles inside) and hand to the core; False: wait for room."""
        link = self.link
        attached: list[Handle] = []

        def attach(obj: object) -> int:
            if not isinstance(obj, Handle):
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


class Handle:
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

    def _check_attachable(self, others: list[Handle]) -> None:
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
