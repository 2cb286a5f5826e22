"""The connection's queue of events for the application, where plain runs are gathered.

Events never change once queued (:mod:`.events`). Yet a burst of plain
messages of one channel, delivered datagram by datagram or chunk by chunk
within one flush, should reach the application as one
:class:`~aqueduct.proto.events.MessagesReceived`: the runtime's cost is per
event. So a plain run is held here, beside the queue, while the plain runs
of the same channel that follow join it, and queued whole as soon as
anything else is queued or the queue is read.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from aqueduct.proto.events import Event, MessagesReceived


class EventQueue:
    """A FIFO of events plus the one plain run still being gathered."""

    __slots__ = ("_queue", "_run")

    def __init__(self) -> None:
        self._queue: deque[Event] = deque()
        self._run: MessagesReceived | None = None  # the plain run being gathered, not queued yet

    def __bool__(self) -> bool:
        return bool(self._queue) or self._run is not None

    def __len__(self) -> int:
        return len(self._queue) + (self._run is not None)

    def append(self, event: Event) -> None:
        """Queue ``event``; a plain run joins the run being gathered if it is of the same channel.

        A gathered run's lists grow (the caller hands over fresh ones).
        """
        if type(event) is MessagesReceived and not event.headers and not event.attachments:
            run = self._run
            if run is not None and run.chanid == event.chanid:
                run.payloads += event.payloads
                run.costs += event.costs
                return
            self._seal()
            self._run = event
            return
        self._seal()
        self._queue.append(event)

    def extend(self, events: Iterable[Event]) -> None:
        self._seal()
        self._queue.extend(events)

    def popleft(self) -> Event:
        self._seal()
        return self._queue.popleft()

    def _seal(self) -> None:
        """Queue the run being gathered, whole."""
        if self._run is not None:
            self._queue.append(self._run)
            self._run = None
