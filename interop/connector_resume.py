"""The ``connector-resume`` test case: a connector session over Aqueduct survives RESTART.

Unlike the other cases it runs the connector protocol (spec/connector-wire.md
section 3) on top of Aqueduct, through the project's connector library and
worker transport, and it needs two Aqueduct connections: the worker sends
RESTART part-way, the connector reconnects, handshakes again and resumes from
the points of reference in the new OK.

- client: a :class:`~aqueduct.connector.Connector` (program
  ``interop``, instance ``connector-resume``) opens stream 1 and sends ids
  ``0..RESTART_AT-1`` (payload ``b"resume-<id>"``); the worker returns credits
  for them but commits nothing, so all of them sit unacknowledged in the
  connector's buffer when the worker sends RESTART. Once the connector has
  handshaken a second time, the client sends ids ``RESTART_AT..COUNT-1`` and
  passes when every id is acked;
- server: a worker with an in-memory sink. In the first session it stores
  messages and grants credits only; after ``RESTART_AT`` messages it sends
  RESTART; from then on it commits (acks points of reference) at once. It
  passes once stream 1 holds exactly ids ``0..COUNT-1`` in order, payloads
  intact (no gap, no duplicate: the unacked first half must not be stored
  twice), over two sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from pathlib import Path

from aqueduct.connector import Connector, ConnectorStream, MemorySink, WorkerPeer, serve_aqueduct
from aqueduct.connector.events import HelloAccepted, RecordsAccepted, WorkerEvent
from interop.testcases import CaseFailed, check

NAME = "connector-resume"
PROGRAM, INSTANCE, STREAM = "interop", "connector-resume", 1
COUNT = 300
RESTART_AT = 100
WAIT = 45.0  # bound of each wait; the endpoint's own timeout still applies

log = logging.getLogger("interop.connector_resume")


def payload(message_id: int) -> bytes:
    return f"resume-{message_id}".encode()


class RestartingSink(MemorySink):
    """The in-memory sink that commits nothing in the first session, then RESTARTs it."""

    def __init__(self) -> None:
        super().__init__(auto_ack=False)
        self.sessions = 0
        self.restarted = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def handle(self, peer: WorkerPeer, event: WorkerEvent) -> None:
        await super().handle(peer, event)
        if isinstance(event, HelloAccepted):
            self.sessions += 1
        if not isinstance(event, RecordsAccepted) or self.restarted:
            return
        peer.grant_credits(len(event.records))  # stored, but not committed
        if len(self.messages(PROGRAM, INSTANCE, STREAM)) >= RESTART_AT:
            self.restarted = True
            self.auto_ack = True  # the next session commits as it goes
            # Not awaited here: handle() runs inside the session's input path.
            task = asyncio.ensure_future(peer.restart())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


async def run_server(host: str, port: int, certfile: Path, keyfile: Path, quic_backend: str = "aioquic") -> str:
    """The worker half; returns a summary, raises :class:`CaseFailed`."""
    sink = RestartingSink()
    worker = await serve_aqueduct(host, port, sink, certfile=certfile, keyfile=keyfile, backend=quic_backend)
    log.info("listening on %s:%d", host, port)
    try:
        try:
            await sink.wait_for(
                lambda: len(sink.messages(PROGRAM, INSTANCE, STREAM)) >= COUNT
                and sink.sessions >= 2,
                WAIT,
            )
        except TimeoutError:
            got = len(sink.messages(PROGRAM, INSTANCE, STREAM))
            raise CaseFailed(
                f"{NAME}: {got}/{COUNT} messages over {sink.sessions} session(s) within {WAIT:.0f} s"
            ) from None
        messages = sink.messages(PROGRAM, INSTANCE, STREAM)
        ids = [m.message_id for m in messages]
        check(ids == list(range(COUNT)), f"{NAME}: ids are not 0..{COUNT - 1} exactly once: "
              f"{_describe(ids)}")
        check(all(m.payload == payload(m.message_id) for m in messages), f"{NAME}: payload differs")
        # Let the connector see its last ACK and hang up first.
        with contextlib.suppress(TimeoutError):
            await sink.wait_for(lambda: not sink.peers, 10.0)
        return f"{COUNT} messages exactly once over {sink.sessions} sessions (RESTART after {RESTART_AT})"
    finally:
        await worker.close()


def _describe(ids: list[int | None]) -> str:
    counts = Counter(ids)
    dups = sorted(i for i, n in counts.items() if i is not None and n > 1)
    missing = [i for i in range(COUNT) if i not in counts]
    return f"{len(ids)} ids, duplicates {dups[:5]}, missing {missing[:5]}"


async def run_client(host: str, port: int, cafile: Path | None, quic_backend: str = "aioquic") -> str:
    """The connector half; returns a summary, raises :class:`CaseFailed`."""
    connector = Connector(
        f"aqueduct://{host}:{port}",
        program=PROGRAM,
        instance=INSTANCE,
        cafile=str(cafile) if cafile else None,
        connect_timeout=WAIT,
        quic_backend=quic_backend,
    )
    async with connector:
        stream = await connector.stream(STREAM, "interop/resume")
        check(stream.resume_from == 0, f"{NAME}: a fresh worker offered resume point {stream.resume_from}")
        await _send_range(stream, 0, RESTART_AT)
        await _wait_second_handshake(connector)
        await _send_range(stream, RESTART_AT, COUNT)
        try:
            await stream.wait_acked(COUNT, timeout=WAIT)
        except TimeoutError:
            raise CaseFailed(f"{NAME}: acked up to {stream.acked}/{COUNT} only") from None
        return f"all {COUNT} acked over {connector.stats.connections} handshakes"


async def _send_range(stream: ConnectorStream, start: int, stop: int) -> None:
    for message_id in range(start, stop):
        sent = await stream.send(payload(message_id))
        check(sent == message_id, f"{NAME}: message got id {sent}, expected {message_id}")


async def _wait_second_handshake(connector: Connector) -> None:
    """Poll (bounded) until the RESTART made the connector handshake again."""
    deadline = asyncio.get_running_loop().time() + WAIT
    while connector.stats.connections < 2:
        if asyncio.get_running_loop().time() > deadline:
            raise CaseFailed(f"{NAME}: no RESTART/reconnect within {WAIT:.0f} s")
        await asyncio.sleep(0.02)
