"""The delivery protocol: how a channel's far side reaches a handle.

A :class:`~aqueduct.runtime.handles.Receiver` reads from its
:class:`Inbox`; a :class:`~aqueduct.runtime.handles.Sender` waits at its
:class:`SendGate`. Whatever feeds them calls only the methods here, with
past-tense names for what happened: the local sender of an in-process pair
as much as the :class:`~aqueduct.runtime.driver.core_driver.Driver` of a networked
channel. One rulebook for both, and no code outside a handle's module
touches a handle's private state.
"""

from __future__ import annotations

import asyncio
from collections import deque
from itertools import repeat
from typing import Any

from aqueduct.proto.errors import Cancelled

FAILED = object()
"""Marks an :class:`Inbox` entry whose value is the error to raise in its place."""


class Finished(Exception):  # noqa: N818 - the protocol's name for the normal end
    """``recv()`` after the sender finished and every message was read.

    Not an :class:`~aqueduct.proto.errors.AqueductError`: finishing is the
    normal end of a channel, and ``async for`` simply stops.
    """


class Inbox:
    """A Receiver's buffered messages and how its channel ended.

    Entries are ``(value, cost, full)``: ``full`` is the whole ``Message``
    when the message has headers or attachments, ``None`` for a plain
    value (no object beyond the value is built per message: ``async for``
    on a busy channel only needs values), and :data:`FAILED` when ``value``
    is the error to raise. ``cost`` is what dequeuing it returns to the
    sender's window.
    """

    __slots__ = ("items", "outcome", "closed", "_waiter")

    def __init__(self) -> None:
        self.items: deque[tuple[Any, int, Any]] = deque()
        self.outcome: Exception | None = None  # raised once the items are read
        self.closed = False  # the Receiver closed: nothing is taken any more
        self._waiter: asyncio.Future[None] | None = None

    # -- delivery protocol (the far side calls these) ---------------------------
    def message_arrived(self, message: Any, cost: int) -> None:
        """A message (a ``Message``: value, headers, attachments)."""
        if self.closed or self.outcome is not None:
            return
        full = message if message.headers or message.attachments else None
        self.items.append((message.value, cost, full))
        self.wake()

    def values_arrived(self, values: list[Any], costs: list[int]) -> None:
        """Plain messages (no headers, no attachments), in order."""
        if self.closed or self.outcome is not None:
            return
        self.items.extend(zip(values, costs, repeat(None)))
        self.wake()

    def undecodable_arrived(self, error: Exception, cost: int) -> None:
        """A message that could not be decoded: ``recv`` raises ``error`` in its place."""
        if self.closed or self.outcome is not None:
            return
        self.items.append((error, cost, FAILED))
        self.wake()

    def ended(self, outcome: Exception) -> None:
        """No more messages after the buffered ones; then ``outcome`` is raised."""
        if self.outcome is None:
            self.outcome = outcome
        self.wake()

    def cancelled(self) -> None:
        """The sender cancelled: buffered messages are dropped."""
        self.items.clear()
        self.ended(Cancelled("the sender cancelled the channel"))

    def lost(self, outcome: Exception) -> None:
        """Lost in transit: fail at once (buffered messages cannot be trusted to matter)."""
        self.items.clear()
        self.ended(outcome)

    # -- the Receiver's side ------------------------------------------------------
    def close(self) -> None:
        self.closed = True
        self.items.clear()
        self.wake()

    def wake(self) -> None:
        """Let a waiting reader look again (it may find its handle sent away)."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self) -> None:
        """Until something arrives or the channel ends."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


class SendGate:
    """Where a Sender's ``send()`` and ``finish()`` wait, and how its channel failed.

    ``room`` says the last networked send left the queue not full and
    nothing ended the channel since: the next plain ``bytes`` send may go
    straight to the link. Several tasks may share one Sender, so every
    waiter is woken (or failed).
    """

    __slots__ = ("room", "failure", "_window_waiters", "_finish_done")

    def __init__(self) -> None:
        self.room = False
        self.failure: Exception | None = None
        self._window_waiters: list[asyncio.Future[None]] = []
        self._finish_done: asyncio.Future[None] | None = None

    # -- delivery protocol (the far side calls these) ---------------------------
    def window_opened(self) -> None:
        for waiter in self._window_waiters:
            if not waiter.done():
                waiter.set_result(None)

    def finish_confirmed(self) -> None:
        """The receiver got everything up to the finish and closed the channel."""
        if self._finish_done is not None and not self._finish_done.done():
            self._finish_done.set_result(None)

    def failed(self, outcome: Exception) -> None:
        """The channel ended under the sender (receiver closed, lost, connection gone)."""
        if self.failure is None:
            self.failure = outcome
        self.stop(outcome)

    # -- the Sender's side ----------------------------------------------------------
    def stop(self, exc: Exception) -> None:
        """No more sends: fail every waiter with ``exc``."""
        self.room = False
        for waiter in (*self._window_waiters, self._finish_done):
            if waiter is not None and not waiter.done():
                waiter.set_exception(exc)

    async def wait_window(self) -> None:
        """Until the next "window opened" (or the channel's failure)."""
        waiter = asyncio.get_running_loop().create_future()
        self._window_waiters.append(waiter)
        try:
            await waiter
        finally:
            self._window_waiters.remove(waiter)

    def expect_finish(self) -> asyncio.Future[None]:
        """A future the far side's :meth:`finish_confirmed` (or a failure) resolves."""
        self._finish_done = asyncio.get_running_loop().create_future()
        return self._finish_done
