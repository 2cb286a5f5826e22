"""The connection's queue of events for the application, where plain runs are gathered.

Events never change once queued (:mod:`.events`). Yet a burst of plain
messages of one channel, delivered datagram by datagram or chunk by chunk
within one flush, should reach the application as one
:class:`~aqueduct.proto.events.MessageRunReceived`: the runtime's cost is per
event. So the run is gathered here, beside the queue, and queued whole as
soon as anything else is queued or the queue is read.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from aqueduct.proto.events import Event, MessageRunReceived


class EventQueue:
    """A FIFO of events plus the one plain run still being gathered."""

    __slots__ = ("_queue", "_run_chanid", "_payloads", "_costs")

    def __init__(self) -> None:
        self._queue: deque[Event] = deque()
        self._run_chanid = -1  # the channel of the run being gathered (-1: none)
        self._payloads: list[bytes] = []
        self._costs: list[int] = []

    def __bool__(self) -> bool:
        return bool(self._queue) or self._run_chanid >= 0

    def __len__(self) -> int:
        return len(self._queue) + (self._run_chanid >= 0)

    def append(self, event: Event) -> None:
        self._seal()
        self._queue.append(event)

    def extend(self, events: Iterable[Event]) -> None:
        self._seal()
        self._queue.extend(events)

    def add_run(self, chanid: int, payloads: list[bytes], costs: list[int]) -> None:
        """Plain messages for ``chanid``; they join the run being gathered if it is that channel's.

        The lists become the run's (the caller hands over fresh ones).
        """
        if chanid != self._run_chanid:
            self._seal()
            self._run_chanid, self._payloads, self._costs = chanid, payloads, costs
        else:
            self._payloads += payloads
            self._costs += costs

    def popleft(self) -> Event:
        self._seal()
        return self._queue.popleft()

    def _seal(self) -> None:
        """Queue the run being gathered, whole."""
        if self._run_chanid >= 0:
            self._queue.append(MessageRunReceived(self._run_chanid, self._payloads, self._costs))
            self._run_chanid, self._payloads, self._costs = -1, [], []
