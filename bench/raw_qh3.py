"""Baselines on qh3 (aioquic's fork with a Rust core): the same traffic as :mod:`bench.raw_quic`.

The third raw stack of issue 19's table, measured beside aioquic and
picoquic so ``docs/performance.md`` shows all three from one run. qh3 is
not an Aqueduct backend, only a yardstick: it installs with the ``bench``
extra (``pip install -e ".[bench]"``), and without it these roles report
the missing module while the other rows run.

qh3 keeps aioquic's asyncio layer, so the roles are :mod:`bench.raw_quic`'s
with qh3's classes (:data:`QH3`). Same settings as the aioquic baseline:
ALPN ``aqueduct``, datagram frames on, and aioquic's default flow-control
limits (1 MiB per stream and per connection; qh3's own defaults are 6 and
15 MiB). What waits unsent on a stream is qh3's public
``get_send_buffer_size``; qh3 gives no view of its queued datagrams, so the
datagram sender hands them over and lets the loop flush them every
``yield_every`` messages, and the receiver counts what arrives.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from qh3.asyncio import serve
from qh3.asyncio.protocol import QuicConnectionProtocol
from qh3.quic import events
from qh3.quic.configuration import QuicConfiguration
from qh3.quic.connection import QuicConnection

from aqueduct.runtime.transport import ALPN, MAX_DATAGRAM_FRAME_SIZE
from bench.common import SERVER_NAME, Certs, payload, send_for
from bench.raw_quic import (
    Paced,
    Stack,
    _connect,
    _finish,
    on_bulk,
    on_datagram,
    on_small,
    send_stream,
    serve_events,
)

# aioquic's defaults, which the aioquic baseline and Aqueduct's endpoints use.
FLOW_CONTROL = {"max_data": 1 << 20, "max_stream_data": 1 << 20}


class RawProtocol(Paced, QuicConnectionProtocol):
    """qh3 protocol that hands events to a callback and wakes a paced writer."""


def _configuration(is_client: bool, certs: Certs) -> QuicConfiguration:
    config = QuicConfiguration(
        is_client=is_client,
        alpn_protocols=[ALPN],
        max_datagram_frame_size=MAX_DATAGRAM_FRAME_SIZE,
        **FLOW_CONTROL,
    )
    if is_client:
        config.server_name = SERVER_NAME
        config.load_verify_locations(cafile=str(certs.ca))
    else:
        config.load_cert_chain(certs.server_cert, certs.server_key)
    return config


QH3 = Stack(
    serve=serve,
    protocol=RawProtocol,
    connection=QuicConnection,
    server_configuration=partial(_configuration, False),
    client_configuration=partial(_configuration, True),
    unsent=lambda quic, stream_id: quic.get_send_buffer_size(stream_id),
)


async def send_datagram(params: dict[str, Any], certs: Certs, port: int) -> dict[str, Any]:
    proto, transport = await _connect(certs, port, QH3)
    quic = proto._quic
    body = payload(params["size"])

    def send_one() -> None:
        quic.send_datagram_frame(body)
        proto._transmit_soon()

    sent = await send_for(params["seconds"], send_one, params["yield_every"])
    quic.send_stream_data(quic.get_next_available_stream_id(is_unidirectional=True), b"", True)
    proto.transmit()
    await _finish(proto, transport, params["limit"])
    return {"sent": sent}


# The worker finds each role's two sides by name (serve_<name>, send_<name>).
serve_bulk = partial(serve_events, handler=on_bulk(events.StreamDataReceived), stack=QH3)
serve_small = partial(serve_events, handler=on_small(events.StreamDataReceived), stack=QH3)
serve_datagram = partial(
    serve_events, handler=on_datagram(events.DatagramFrameReceived, events.StreamDataReceived), stack=QH3
)
send_bulk = partial(send_stream, framed=False, stack=QH3)
send_small = partial(send_stream, framed=True, stack=QH3)
