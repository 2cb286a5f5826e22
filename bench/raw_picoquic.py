"""Baselines on picoquic (through aiopquic): the same traffic as :mod:`bench.raw_quic`, no Aqueduct.

Same ALPN, datagram size and congestion control (cubic) as Aqueduct's
picoquic backend. picoquic's rings push back instead of queueing without
bound: a stream write that does not fit (``BufferError``) waits for the
ring's drain event; a datagram that does not fit (0) counts as dropped
locally, as a full UNRELIABLE queue evicts. The server listens on every
interface (aiopquic cannot bind one address), so these roles run only
where loopback is the only interface: ``python -m interop.netns --
python -m bench.run --only ...``.

* ``bulk``: 64 KiB writes on one unidirectional stream;
* ``small``: 4-byte big-endian length + body on one stream, split back
  into messages by the receiver;
* ``datagram``: one QUIC DATAGRAM per message; the receiver counts what
  arrives.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from aiopquic.asyncio.client import connect
from aiopquic.asyncio.protocol import QuicConnectionProtocol
from aiopquic.asyncio.server import serve
from aiopquic.quic import events
from aiopquic.quic.configuration import QuicConfiguration
from aiopquic.quic.connection import QuicConnection

from aqueduct.runtime.backends.aiopquic import free_udp_port
from aqueduct.runtime.transport import ALPN, MAX_DATAGRAM_FRAME_SIZE
from bench.common import SERVER_NAME, Certs, Meter, listen_host, payload, run_until_idle, send_for
from bench.raw_quic import PREFIX, Handler, on_bulk, on_datagram, on_small

DRAIN_POLL = 0.002  # seconds: a drain event, or a re-try after this


class RawProtocol(QuicConnectionProtocol):
    """aiopquic protocol that hands every event to a callback."""

    on_event: Callable[[events.QuicEvent], None] = staticmethod(lambda e: None)

    def quic_event_received(self, event: events.QuicEvent) -> None:
        self.on_event(event)


def _configuration(is_client: bool, certs: Certs) -> QuicConfiguration:
    config = QuicConfiguration(
        is_client=is_client,
        alpn_protocols=[ALPN],
        max_datagram_frame_size=MAX_DATAGRAM_FRAME_SIZE,
        congestion_control_algorithm="cubic",
    )
    if is_client:
        config.server_name = SERVER_NAME
        config.load_verify_locations(str(certs.ca))
    else:
        config.load_cert_chain(str(certs.server_cert), str(certs.server_key))
    return config


# ---------------------------------------------------------------- server side
async def _serve(
    params: dict[str, Any],
    certs: Certs,
    ready: Callable[[int], None],
    handler: Handler,
) -> dict[str, Any]:
    host = listen_host("picoquic")
    loop = asyncio.get_running_loop()
    meter = Meter(params["warmup"])
    done: asyncio.Future[None] = loop.create_future()

    def create_protocol(quic: QuicConnection, stream_handler: Any = None) -> RawProtocol:
        proto = RawProtocol(quic)
        proto.on_event = handler(meter, done)
        return proto

    port = free_udp_port(socket.AF_INET6)
    server = await serve(host, port, configuration=_configuration(False, certs), create_protocol=create_protocol)
    ready(port)
    try:
        ended = await run_until_idle(done, meter, params["idle"], params["limit"])
    finally:
        server.close()
    return {**meter.result(), "ended": ended}


_on_bulk = on_bulk(events.StreamDataReceived)
_on_small = on_small(events.StreamDataReceived)
_on_datagram = on_datagram(events.DatagramFrameReceived, events.StreamDataReceived)


# ---------------------------------------------------------------- client side
async def _write(quic: QuicConnection, stream_id: int, data: bytes, end_stream: bool = False) -> None:
    """Hand ``data`` to picoquic, waiting for its stream ring to drain while it is full."""
    while True:
        try:
            quic.send_stream_data(stream_id, data, end_stream)
            return
        except BufferError:
            drained = quic.get_tx_data_drain_event(stream_id)
            try:
                await asyncio.wait_for(drained.wait(), DRAIN_POLL)
            except TimeoutError:
                pass
            drained.clear()


async def _send_stream(params: dict[str, Any], certs: Certs, port: int, framed: bool) -> dict[str, Any]:
    body = payload(params["size"])
    data = (len(body).to_bytes(PREFIX, "big") + body) if framed else body
    async with connect("127.0.0.1", port, configuration=_configuration(True, certs)) as proto:
        quic = proto._quic
        sid = quic.get_next_available_stream_id(is_unidirectional=True)

        def send_one() -> Any:
            try:
                quic.send_stream_data(sid, data, False)
                return None
            except BufferError:
                return _write(quic, sid, data)

        began = time.perf_counter()
        sent = await send_for(params["seconds"], send_one)
        await _write(quic, sid, b"", True)
        elapsed = time.perf_counter() - began
        await _wait_closed(proto, params["limit"])
    return {"sent": sent, "send_seconds": elapsed}


async def _wait_closed(proto: QuicConnectionProtocol, limit: float) -> None:
    """Until the server closes (it has read everything)."""
    try:
        await asyncio.wait_for(proto._closed.wait(), limit)
    except TimeoutError:
        pass


async def send_datagram(params: dict[str, Any], certs: Certs, port: int) -> dict[str, Any]:
    body = payload(params["size"])
    dropped = 0
    async with connect("127.0.0.1", port, configuration=_configuration(True, certs)) as proto:
        quic = proto._quic

        def send_one() -> None:
            nonlocal dropped
            if quic.send_datagram_frame(body) == 0:
                dropped += 1

        sent = await send_for(params["seconds"], send_one, params["yield_every"])
        await asyncio.sleep(0.05)  # let the ring drain before announcing the end
        await _write(quic, quic.get_next_available_stream_id(is_unidirectional=True), b"", True)
        await _wait_closed(proto, params["limit"])
    return {"sent": sent, "dropped_locally": dropped}


# The worker finds each role's two sides by name (serve_<name>, send_<name>).
serve_bulk = partial(_serve, handler=_on_bulk)
serve_small = partial(_serve, handler=_on_small)
serve_datagram = partial(_serve, handler=_on_datagram)
send_bulk = partial(_send_stream, framed=False)
send_small = partial(_send_stream, framed=True)
