"""Baselines: the same traffic written straight onto aioquic, no Aqueduct in between.

Same TLS and QUIC settings as Aqueduct endpoints (``aqueduct.runtime.backends.tls``:
TLS 1.3, ALPN ``aqueduct``, datagrams on, aioquic's default flow-control
limits). The sender bounds what it leaves queued inside aioquic, as
Aqueduct's send window does, so neither side wins by buffering the whole run
in memory:

* ``bulk``: 64 KiB writes on one unidirectional stream;
* ``small``: 4-byte big-endian length + body, all on one stream; the
  receiver splits the stream back into messages;
* ``stream_per_message``: one unidirectional stream per message (FIN after it);
* ``datagram``: one QUIC DATAGRAM per message; at most ``MAX_QUEUED_DATAGRAMS``
  wait inside aioquic, the oldest is dropped beyond that (as Aqueduct's
  UNRELIABLE sender evicts its oldest); the receiver counts what arrives.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aioquic.asyncio import serve
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic import events
from aioquic.quic.connection import QuicConnection

from aqueduct.runtime.backends.tls import client_configuration, server_configuration
from bench.common import SERVER_NAME, Certs, Meter, payload, run_until_idle, send_for

# Bytes a stream sender may leave unsent inside aioquic before it waits: the
# size of Aqueduct's default send window (1 MiB), so both queue alike.
MAX_UNSENT = 1 << 20
# Streams a stream-per-message sender keeps open at once.
MAX_OPEN_STREAMS = 1024
# Datagrams waiting inside aioquic; Aqueduct's default max_queued.
MAX_QUEUED_DATAGRAMS = 1024
PREFIX = 4


class Paced:
    """Mixin for an aioquic-style protocol: events go to a callback, a paced writer is woken.

    Mixed into aioquic's protocol here and into its fork's (qh3) in
    :mod:`bench.raw_qh3`, whose asyncio layer has the same shape.
    """

    _loop: asyncio.AbstractEventLoop

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_event: Callable[[events.QuicEvent], None] = lambda e: None
        self._writable: asyncio.Future[None] | None = None
        self._can_write: Callable[[], bool] = lambda: True

    def quic_event_received(self, event: events.QuicEvent) -> None:
        self.on_event(event)

    def transmit(self) -> None:
        super().transmit()
        waiter = self._writable
        if waiter is not None and not waiter.done() and self._can_write():
            waiter.set_result(None)

    async def wait_writable(self, can_write: Callable[[], bool]) -> None:
        """Wait until ``can_write()``; re-checked after every flush to the socket."""
        while not can_write():
            self._can_write = can_write
            self._writable = self._loop.create_future()
            self._transmit_soon()
            try:
                await asyncio.wait_for(self._writable, 0.5)
            except TimeoutError:
                pass  # re-check: a flush may have raced with the future's creation
            finally:
                self._writable = None


class RawProtocol(Paced, QuicConnectionProtocol):
    """aioquic protocol that hands events to a callback and wakes a paced writer."""


def _unsent(quic: QuicConnection, stream_id: int) -> int:
    stream = quic._streams.get(stream_id)
    if stream is None:
        return 0
    sender = stream.sender
    return sender._buffer_stop - sender.highest_offset


@dataclass(frozen=True)
class Stack:
    """An aioquic-shaped QUIC stack to run the stream baselines on: aioquic, or its fork qh3.

    What differs between them: the classes, how a configuration is made,
    and how the sender sees what still waits unsent on a stream.
    """

    serve: Callable[..., Awaitable[Any]]
    protocol: type[Paced]
    connection: type
    server_configuration: Callable[[Certs], Any]
    client_configuration: Callable[[Certs], Any]
    unsent: Callable[[Any, int], int]


AIOQUIC = Stack(
    serve=serve,
    protocol=RawProtocol,
    connection=QuicConnection,
    server_configuration=lambda certs: server_configuration(certs.server_cert, certs.server_key),
    client_configuration=lambda certs: client_configuration(SERVER_NAME, certs.ca, True, None, None),
    unsent=_unsent,
)


# ---------------------------------------------------------------- server side
async def serve_events(
    params: dict[str, Any],
    certs: Certs,
    ready: Callable[[int], None],
    handler: Handler,
    stack: Stack = AIOQUIC,
) -> dict[str, Any]:
    """Accept one connection, feed its events to ``handler``'s callback until it says done."""
    loop = asyncio.get_running_loop()
    meter = Meter(params["warmup"])
    done: asyncio.Future[None] = loop.create_future()
    protocols: list[Any] = []

    def create_protocol(quic: Any, stream_handler: Any = None) -> Paced:
        proto = stack.protocol(quic)
        proto.on_event = handler(meter, done)
        protocols.append(proto)
        return proto

    config = stack.server_configuration(certs)
    server = await stack.serve("127.0.0.1", 0, configuration=config, create_protocol=create_protocol)
    assert server._transport is not None
    ready(server._transport.get_extra_info("sockname")[1])
    ended = await run_until_idle(done, meter, params["idle"], params["limit"])
    for proto in protocols:
        proto.close()
    await asyncio.sleep(0.05)  # let the CONNECTION_CLOSE leave
    server.close()
    return {**meter.result(), "ended": ended}


Handler = Callable[[Meter, asyncio.Future[None]], Callable[[Any], None]]


def on_bulk(stream_data: type) -> Handler:
    """Count the bytes of ``stream_data`` events; done at the stream's end (for either stack's events)."""

    def handler(meter: Meter, done: asyncio.Future[None]) -> Callable[[Any], None]:
        def on_event(event: Any) -> None:
            if isinstance(event, stream_data):
                meter.add(0, len(event.data))
                if event.end_stream and not done.done():
                    done.set_result(None)

        return on_event

    return handler


def split_messages(buf: bytearray) -> tuple[int, int]:
    """Take the whole length-prefixed messages off the front of ``buf``: (count, bytes)."""
    pos, count, nbytes, end = 0, 0, 0, len(buf)
    while end - pos >= PREFIX:
        size = int.from_bytes(buf[pos : pos + PREFIX], "big")
        stop = pos + PREFIX + size
        if stop > end:
            break
        message = bytes(buf[pos + PREFIX : stop])  # hand a message out, as a user would get it
        nbytes += len(message)
        count += 1
        pos = stop
    del buf[:pos]
    return count, nbytes


def on_small(stream_data: type) -> Handler:
    """Split ``stream_data`` events back into length-prefixed messages and count them."""

    def handler(meter: Meter, done: asyncio.Future[None]) -> Callable[[Any], None]:
        buf = bytearray()

        def on_event(event: Any) -> None:
            if not isinstance(event, stream_data):
                return
            buf.extend(event.data)
            count, nbytes = split_messages(buf)
            if count:
                meter.add(count, nbytes)
            if event.end_stream and not done.done():
                done.set_result(None)

        return on_event

    return handler


def _on_stream_per_message(
    meter: Meter, done: asyncio.Future[None]
) -> Callable[[events.QuicEvent], None]:
    partial: dict[int, bytes] = {}

    def on_event(event: events.QuicEvent) -> None:
        if not isinstance(event, events.StreamDataReceived):
            return
        data = partial.pop(event.stream_id, b"") + event.data
        if not event.end_stream:
            partial[event.stream_id] = data
        elif data == b"":
            if not done.done():  # an empty stream marks the end of the run
                done.set_result(None)
        else:
            meter.add(1, len(data))

    return on_event


def on_datagram(datagram: type, stream_data: type) -> Handler:
    """Count ``datagram`` events; done shortly after the sender's end-of-run stream."""

    def handler(meter: Meter, done: asyncio.Future[None]) -> Callable[[Any], None]:
        def on_event(event: Any) -> None:
            if isinstance(event, datagram):
                meter.add(1, len(event.data))
            elif isinstance(event, stream_data) and event.end_stream:
                if not done.done():  # control stream: the sender stopped
                    asyncio.get_running_loop().call_later(0.2, _settle, done)

        return on_event

    return handler


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


_on_bulk = on_bulk(events.StreamDataReceived)
_on_small = on_small(events.StreamDataReceived)
_on_datagram = on_datagram(events.DatagramFrameReceived, events.StreamDataReceived)


# ---------------------------------------------------------------- client side
async def _connect(
    certs: Certs, port: int, stack: Stack = AIOQUIC
) -> tuple[Any, asyncio.DatagramTransport]:
    loop = asyncio.get_running_loop()
    quic = stack.connection(configuration=stack.client_configuration(certs))
    transport, proto = await loop.create_datagram_endpoint(
        lambda: stack.protocol(quic), remote_addr=("127.0.0.1", port)
    )
    assert isinstance(proto, stack.protocol)
    proto.connect(("127.0.0.1", port))
    await asyncio.wait_for(proto.wait_connected(), 20)
    return proto, transport


async def _finish(proto: Any, transport: asyncio.DatagramTransport, limit: float) -> None:
    """Wait until the server closes (it has read everything), then drop the socket."""
    try:
        await asyncio.wait_for(proto.wait_closed(), limit)
    except TimeoutError:
        proto.close()
    transport.close()


async def send_stream(
    params: dict[str, Any], certs: Certs, port: int, framed: bool, stack: Stack = AIOQUIC
) -> dict[str, Any]:
    """Bulk or length-prefixed writes on one stream, at most ``MAX_UNSENT`` waiting unsent."""
    proto, transport = await _connect(certs, port, stack)
    quic = proto._quic
    unsent = stack.unsent
    body = payload(params["size"])
    data = (len(body).to_bytes(PREFIX, "big") + body) if framed else body
    sid = quic.get_next_available_stream_id(is_unidirectional=True)

    def room() -> bool:
        return unsent(quic, sid) < MAX_UNSENT // 2

    def send_one() -> Any:
        quic.send_stream_data(sid, data)
        if unsent(quic, sid) >= MAX_UNSENT:
            return proto.wait_writable(room)
        proto._transmit_soon()
        return None

    began = time.perf_counter()
    sent = await send_for(params["seconds"], send_one)
    quic.send_stream_data(sid, b"", end_stream=True)
    proto.transmit()
    elapsed = time.perf_counter() - began
    await _finish(proto, transport, params["limit"])
    return {"sent": sent, "send_seconds": elapsed}


async def send_stream_per_message(params: dict[str, Any], certs: Certs, port: int) -> dict[str, Any]:
    proto, transport = await _connect(certs, port)
    quic = proto._quic
    body = payload(params["size"])

    def room() -> bool:
        return len(quic._streams) < MAX_OPEN_STREAMS // 2

    def send_one() -> Any:
        quic.send_stream_data(quic.get_next_available_stream_id(is_unidirectional=True), body, True)
        if len(quic._streams) >= MAX_OPEN_STREAMS:
            return proto.wait_writable(room)
        proto._transmit_soon()
        return None

    sent = await send_for(params["seconds"], send_one)
    quic.send_stream_data(quic.get_next_available_stream_id(is_unidirectional=True), b"", True)
    proto.transmit()
    await _finish(proto, transport, params["limit"])
    return {"sent": sent}


async def send_datagram(params: dict[str, Any], certs: Certs, port: int) -> dict[str, Any]:
    proto, transport = await _connect(certs, port)
    quic = proto._quic
    body = payload(params["size"])
    pending = quic._datagrams_pending
    dropped = 0

    def send_one() -> None:
        nonlocal dropped
        quic.send_datagram_frame(body)
        if len(pending) > MAX_QUEUED_DATAGRAMS:
            pending.popleft()
            dropped += 1
        proto._transmit_soon()

    sent = await send_for(params["seconds"], send_one, params["yield_every"])
    packets = quic._packet_number
    await asyncio.sleep(0.05)  # let the queue drain before announcing the end
    quic.send_stream_data(quic.get_next_available_stream_id(is_unidirectional=True), b"", True)
    proto.transmit()
    await _finish(proto, transport, params["limit"])
    return {"sent": sent, "packets": packets, "dropped_locally": dropped}


async def serve_bulk(params: dict[str, Any], certs: Certs, ready: Callable[[int], None]) -> dict[str, Any]:
    return await serve_events(params, certs, ready, _on_bulk)


async def serve_small(params: dict[str, Any], certs: Certs, ready: Callable[[int], None]) -> dict[str, Any]:
    return await serve_events(params, certs, ready, _on_small)


async def serve_stream_per_message(
    params: dict[str, Any], certs: Certs, ready: Callable[[int], None]
) -> dict[str, Any]:
    return await serve_events(params, certs, ready, _on_stream_per_message)


async def serve_datagram(
    params: dict[str, Any], certs: Certs, ready: Callable[[int], None]
) -> dict[str, Any]:
    return await serve_events(params, certs, ready, _on_datagram)


async def send_bulk(params: dict[str, Any], certs: Certs, port: int) -> dict[str, Any]:
    return await send_stream(params, certs, port, framed=False)


async def send_small(params: dict[str, Any], certs: Certs, port: int) -> dict[str, Any]:
    return await send_stream(params, certs, port, framed=True)

