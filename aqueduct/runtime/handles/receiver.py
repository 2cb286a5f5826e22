"""The receiving half of a channel, :class:`Receiver`, and its oneshot twin."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from aqueduct.proto.errors import LocalProtocolError
from aqueduct.runtime.handles.delivery import FAILED, Finished, Inbox
from aqueduct.runtime.handles.handle import (
    Handle,
    LocalPipe,
    Message,
    NetworkedChannel,
)
from aqueduct.runtime.handles.headers import Headers


class Receiver(Handle):
    """The receiving half of a channel: ``async for value in rx`` or ``await rx.recv()``.

    Messages wait in its ``inbox`` (see :class:`~aqueduct.runtime.handles.delivery.Inbox`).
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


class OneshotReceiver(Receiver):
    """Receives at most one message: ``value = await orx.recv()``."""

    _kind = "OneshotReceiver"
