"""The sending half of a channel, :class:`Sender`, and its oneshot twin."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from aqueduct.proto.errors import LocalProtocolError
from aqueduct.runtime.handles.delivery import SendGate
from aqueduct.runtime.handles.handle import (
    SEND_RUN,
    Handle,
    LocalPipe,
    Message,
    NetworkedChannel,
    chunked,
)
from aqueduct.runtime.handles.headers import Headers, HeadersLike, normalize_headers
from aqueduct.wire.modes import Mode

if TYPE_CHECKING:
    from aqueduct.runtime.handles.receiver import Receiver


class Sender(Handle):
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
            if not isinstance(handle, Handle):
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
        for chunk in chunked(values, SEND_RUN):
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
