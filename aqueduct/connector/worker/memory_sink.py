"""An in-memory worker sink: keeps every accepted message, acks at once.

It is the smallest complete implementation of :class:`WorkerSink`, for tests
and demos (the bridge's ingest server is the durable one). "Durable" here
means "survives the connection", not the process: points of reference are
kept per ``(program, instance)`` so reconnecting connectors resume.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from aqueduct.connector.events import (
    HelloAccepted,
    RecordsAccepted,
    SessionEnded,
    StreamNotified,
    WorkerEvent,
)
from aqueduct.connector.frames import ConnectorMessage
from aqueduct.connector.inbound import DurableStream
from aqueduct.connector.worker.server import WorkerPeer
from aqueduct.wire.rangeset import RangeSet


@dataclass
class StoredStream:
    """Everything one stream delivered, plus what a resume needs."""

    name: str
    messages: list[ConnectorMessage] = field(default_factory=list)
    received: RangeSet = field(default_factory=RangeSet)
    point: int = 0


class MemorySink:
    """Stores messages in memory and acknowledges them as committed immediately.

    ``auto_ack=False`` leaves acknowledging to the test (``peer.ack``), e.g.
    to keep messages unacknowledged across a RESTART.
    """

    def __init__(self, auto_ack: bool = True) -> None:
        self.auto_ack = auto_ack
        self.streams: dict[tuple[str, str], dict[int, StoredStream]] = {}
        self.events: list[WorkerEvent] = []
        self.peers: list[WorkerPeer] = []
        self._changed = asyncio.Condition()

    def durable_streams(self, program_name: str, instance_name: str) -> list[DurableStream]:
        stored = self.streams.get((program_name, instance_name), {})
        return [
            DurableStream(sid, s.name, s.point, s.received) for sid, s in sorted(stored.items())
        ]

    def messages(self, program: str, instance: str, stream_id: int) -> list[ConnectorMessage]:
        stream = self.streams.get((program, instance), {}).get(stream_id)
        return stream.messages if stream else []

    def payloads(self, program: str, instance: str, stream_id: int) -> list[bytes | None]:
        return [m.payload for m in self.messages(program, instance, stream_id)]

    async def handle(self, peer: WorkerPeer, event: WorkerEvent) -> None:
        key = (peer.program_name, peer.instance_name)
        if isinstance(event, HelloAccepted):
            self.peers.append(peer)
        elif isinstance(event, StreamNotified):
            self.streams.setdefault(key, {}).setdefault(
                event.stream_id, StoredStream(event.stream_name)
            )
        elif isinstance(event, RecordsAccepted):
            stored = self.streams[key][event.stream_id]
            stored.messages.extend(event.records)
            for m in event.records:
                if m.message_id is not None:
                    stored.received.add(m.message_id)
            stored.point = peer.session.streams[event.stream_id].point_of_reference
            if self.auto_ack:
                peer.ack([(event.stream_id, stored.point)], credits=len(event.records))
        elif isinstance(event, SessionEnded) and peer in self.peers:
            self.peers.remove(peer)
        self.events.append(event)
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` holds (checked after every event)."""

        async def waiter() -> None:
            async with self._changed:
                await self._changed.wait_for(predicate)

        await asyncio.wait_for(waiter(), timeout)
