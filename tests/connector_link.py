"""One connection between a connector's outbox and a worker session, driven by hand: the sans-IO tests' wire.

The connector's real :class:`~aqueduct.connector.connector_session.ConnectorSession`
and :class:`~aqueduct.connector.outbound.Outbox` against the real
:class:`~aqueduct.connector.worker_session.WorkerSession`, the bytes
between them held until a test delivers them, so a test decides what
happens between two round trips (a commit, a fault) and what a fault
loses (the bytes in flight). Each test keeps its own store and rules; a
round trip is::

    for event in link.to_worker():   # the connector's frames reach the worker
        ...                          # the test stores them, acks, ...
    link.to_connector()              # the worker's frames reach the connector
    ...                              # the test queues records on the outbox
    link.send()                      # the outbox spends the credits
"""

from __future__ import annotations

from aqueduct.connector.connector_session import ConnectorSession
from aqueduct.connector.events import WorkerEvent
from aqueduct.connector.outbound import Outbox
from aqueduct.connector.worker_session import WorkerSession


class Link:
    """A new connection of ``outbox`` to ``worker``: HELLO is in flight."""

    def __init__(self, outbox: Outbox, worker: WorkerSession) -> None:
        self.outbox = outbox
        self.worker = worker
        self.conn = ConnectorSession("p", "i")
        self.conn.start()
        self._in_flight = self._written()

    def _written(self) -> bytes:
        return b"".join(encoded for _, encoded in self.conn.data_to_send())

    @property
    def in_flight(self) -> bool:
        """The connector wrote bytes the worker has not read yet."""
        return bool(self._in_flight)

    def to_worker(self) -> list[WorkerEvent]:
        """Deliver what the connector wrote; the worker's events."""
        data, self._in_flight = self._in_flight, b""
        return self.worker.receive_data(data)

    def to_connector(self) -> None:
        """Deliver what the worker wrote; its events update the outbox."""
        for event in self.conn.receive_data(self.worker.data_to_send()):
            self.outbox.apply(event)

    def send(self) -> None:
        """Hand the session the outbox's frames its credits cover, and write them."""
        self.outbox.send_into(self.conn)
        self._in_flight += self._written()
