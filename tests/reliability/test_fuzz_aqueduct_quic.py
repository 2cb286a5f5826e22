"""Decoder fuzz against a live Aqueduct server over real QUIC.

The server is the connector worker over Aqueduct (``serve_aqueduct`` on
``aqueduct.serve``) with a ``MemorySink``. A well-behaved connector streams
messages over ``aqueduct://`` the whole time. Meanwhile a raw aioquic client
opens a few hundred connections; each completes a valid Aqueduct handshake
(VERSION + CONNECTION_HEADERS, waits for the server's ACK_VERSION) and then
sends one hostile input: a mutated valid frame sequence on a unidirectional
stream, or a mutated datagram, built with the ``aqueduct.wire`` encoders.

What must hold:

* input the wire decoder refuses closes the connection with application
  error code 1 (PROTOCOL_VIOLATION) and exactly the decoder's reason;
* input the decoder accepts either leaves the connection up (it still
  answers a QUIC PING) or is refused by a higher layer with an application
  close (code 1 or 2) that carries a reason; never a transport error;
* no server task dies (the loop's exception handler stays silent), and the
  good connector's messages all arrive once, intact and acked.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable
from dataclasses import dataclass

import pytest
from aioquic.asyncio.client import connect as quic_connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic import events as qe

import aqueduct
from aqueduct.connector.frames import PROTOCOL_VERSION, ConnectorMessage, Hello, Notify
from aqueduct.connector.frames import encode as encode_connector
from aqueduct.connector.producer.client import Connector
from aqueduct.connector.worker.memory_sink import MemorySink
from aqueduct.proto.errors import ChannelOutcome
from aqueduct.runtime.backends.tls import client_configuration
from aqueduct.runtime.handles import Finished
from aqueduct.runtime.handles.payload import CONNECTION_HEADERS, PayloadError
from aqueduct.wire.chanid import ENTRYPOINT, Side, make_chanid
from aqueduct.wire.errors import WireError
from aqueduct.wire.frames import (
    AckNackUnreliable,
    AckReliable,
    AckVersion,
    AttachmentRef,
    CancelSender,
    CloseReceiver,
    ConnectionHeaders,
    Dequeued,
    FinishSender,
    ForgetChannel,
    MessageFrame,
    RouteTo,
    SentUnreliable,
    Version,
)
from aqueduct.wire.sequence import StreamSequenceDecoder, decode_datagram, encode_sequence
from tests.reliability.faults import Figures, Mutator, tally

pytestmark = pytest.mark.slow  # part of make test; seconds, not minutes

STREAM_INPUTS = 100
DATAGRAM_INPUTS = 30
CONCURRENCY = 8
TIMEOUT = 20.0  # only turns a hang into a failure
GRACE = 0.5  # how long an accepted input gets to provoke a late close
PROTOCOL_VIOLATION, APPLICATION_CLOSE = 1, 2
GOOD = ("well-behaved-producer", "steady-q")


class RawClient(QuicConnectionProtocol):
    """A QUIC client that speaks Aqueduct by hand: it sends whatever bytes it is given."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._decoders: dict[int, StreamSequenceDecoder] = {}
        self.ack_version = asyncio.Event()
        self.closed: asyncio.Future[qe.ConnectionTerminated] = (
            asyncio.get_running_loop().create_future()
        )
        self.pongs: dict[int, asyncio.Event] = {}

    def quic_event_received(self, event: qe.QuicEvent) -> None:
        if isinstance(event, qe.StreamDataReceived):
            decoder = self._decoders.setdefault(event.stream_id, StreamSequenceDecoder())
            if any(isinstance(f, AckVersion) for f in decoder.feed(event.data)):
                self.ack_version.set()
        elif isinstance(event, qe.PingAcknowledged) and event.uid in self.pongs:
            self.pongs[event.uid].set()
        elif isinstance(event, qe.ConnectionTerminated) and not self.closed.done():
            self.closed.set_result(event)
        super().quic_event_received(event)

    def send_stream(self, data: bytes) -> None:
        stream_id = self._quic.get_next_available_stream_id(is_unidirectional=True)
        self._quic.send_stream_data(stream_id, data, end_stream=True)
        self.transmit()

    def send_datagram(self, data: bytes) -> None:
        self._quic.send_datagram_frame(data)
        self.transmit()

    async def handshake(self) -> None:
        """Aqueduct's opening: our VERSION + CONNECTION_HEADERS, then the server's ACK_VERSION."""
        self.send_stream(encode_sequence([Version(), ConnectionHeaders(CONNECTION_HEADERS)]))
        await asyncio.wait_for(self.ack_version.wait(), TIMEOUT)

    async def ping(self) -> None:
        uid = len(self.pongs) + 1
        self.pongs[uid] = asyncio.Event()
        self._quic.send_ping(uid)
        self.transmit()
        await asyncio.wait_for(self.pongs[uid].wait(), TIMEOUT)


def client_stream_chanid(index: int) -> int:
    """A channel this (client) side created and sends on."""
    return make_chanid(Side.CLIENT, Side.CLIENT, False, index)


def server_sent_chanid(index: int) -> int:
    """A channel the client created whose Sender half lives on the server."""
    return make_chanid(Side.CLIENT, Side.SERVER, False, index)


def connector_hello(i: int) -> bytes:
    return encode_connector(Hello(PROTOCOL_VERSION, b"", "fuzz", f"q{i}"))


def stream_seeds(rng: random.Random) -> list[bytes]:
    """Valid client -> server frame sequences (the fuzz starting points)."""
    hello = connector_hello(0)
    notify = encode_connector(Notify(1, "fuzz/1", 0))
    message = encode_connector(ConnectorMessage(0, 1, 0, payload=b"m"))
    control = AttachmentRef(server_sent_chanid(0), ())
    stream = AttachmentRef(client_stream_chanid(1), (("connector-mode", b"ordered"),))
    return [
        encode_sequence([RouteTo(ENTRYPOINT), MessageFrame(0, (), (control,), hello)]),
        encode_sequence(
            [
                RouteTo(ENTRYPOINT),
                MessageFrame(0, (), (control,), hello),
                MessageFrame(1, (("h", b"v"),), (stream,), notify),
            ]
        ),
        encode_sequence([RouteTo(client_stream_chanid(1)), MessageFrame(0, (), (), message * 3)]),
        encode_sequence([Version(), RouteTo(ENTRYPOINT), MessageFrame(0, (), (), rng.randbytes(50))]),
        encode_sequence([RouteTo(ENTRYPOINT), SentUnreliable(2), FinishSender(1)]),
        encode_sequence([RouteTo(ENTRYPOINT), CancelSender()]),
        encode_sequence([RouteTo(server_sent_chanid(0)), AckReliable((0, 1)), Dequeued(10)]),
        encode_sequence([RouteTo(server_sent_chanid(0)), AckNackUnreliable((1, 1)), CloseReceiver()]),
        encode_sequence([RouteTo(client_stream_chanid(2)), ForgetChannel()]),
        encode_sequence([AckVersion(), ConnectionHeaders((("x-fuzz", b"1"),))]),
    ]


def datagram_seeds(rng: random.Random) -> list[bytes]:
    return [
        encode_sequence([RouteTo(client_stream_chanid(1)), MessageFrame(0, (), (), rng.randbytes(30))]),
        encode_sequence([Version(), RouteTo(ENTRYPOINT), MessageFrame(3, (), (), b"d")]),
        encode_sequence([RouteTo(client_stream_chanid(4)), MessageFrame(9, (("k", b"v"),), (), b"")]),
    ]


def decoder_error(data: bytes, datagram: bool) -> str | None:
    """The wire decoder's verdict on one input, as the server would state it."""
    try:
        if datagram:
            decode_datagram(data)
        else:
            decoder = StreamSequenceDecoder()
            decoder.feed(data)
            decoder.end()
    except WireError as exc:
        return str(exc)
    return None


@dataclass
class Outcome:
    index: int
    kind: str
    datagram: bool
    expected: str | None  # decoder's reason, None if the bytes decode
    closed: qe.ConnectionTerminated | None


def problem(o: Outcome) -> str | None:
    """What is wrong with the server's reaction, if anything."""
    c = o.closed
    if c is not None and c.frame_type is not None:
        return f"transport close {c.error_code:#x} ({c.reason_phrase!r}), not an Aqueduct close"
    if o.expected is not None:
        if c is None:
            return f"stayed open although the decoder says {o.expected!r}"
        if c.error_code != PROTOCOL_VIOLATION or c.reason_phrase != o.expected:
            return f"closed {c.error_code} {c.reason_phrase!r}, expected 1 {o.expected!r}"
        return None
    if c is not None and (c.error_code not in (PROTOCOL_VIOLATION, APPLICATION_CLOSE) or not c.reason_phrase):
        return f"closed {c.error_code} with reason {c.reason_phrase!r}"
    return None


async def send_hostile(port: int, cafile: str, o: Outcome, data: bytes) -> None:
    """One connection: valid handshake, one hostile input, then watch the reaction."""
    config = client_configuration("localhost", cafile, True, None, None, idle_timeout=TIMEOUT)
    async with quic_connect("127.0.0.1", port, configuration=config, create_protocol=RawClient) as client:
        assert isinstance(client, RawClient)
        await client.handshake()
        (client.send_datagram if o.datagram else client.send_stream)(data)
        wait = TIMEOUT if o.expected is not None else GRACE
        with contextlib.suppress(TimeoutError):
            o.closed = await asyncio.wait_for(asyncio.shield(client.closed), wait)
        if o.closed is None:
            # Accepted input: the server must still serve this connection (a PING is
            # answered) unless a higher layer closes it meanwhile.
            pong = asyncio.ensure_future(client.ping())
            await asyncio.wait({pong, client.closed}, timeout=TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
            pong.cancel()
            if client.closed.done():
                o.closed = client.closed.result()
            else:
                assert pong.done() and not pong.cancelled(), "the server stopped answering PINGs"


class PlainApp:
    """An ``aqueduct.serve`` application: reads every entrypoint, keeps the good client's values.

    A payload that is not valid CBOR reaches the application as a
    ``PayloadError`` for that one message; this application skips it, which
    is the application's choice, not the protocol's.
    """

    def __init__(self) -> None:
        self.values: list[object] = []
        self.bad_payloads = 0
        self.tasks: set[asyncio.Task[None]] = set()

    async def accept(self, server: aqueduct.Server) -> None:
        async for conn in server:
            task = asyncio.ensure_future(self.read(conn))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def read(self, conn: aqueduct.ServerConnection) -> None:
        while True:
            try:
                message = await conn.entrypoint.recv_message()
            except (Finished, ChannelOutcome):
                return
            except PayloadError:
                self.bad_payloads += 1
                continue
            if isinstance(message.value, dict) and "steady" in message.value:
                self.values.append(message.value["steady"])


async def steady_plain_client(port: int, cafile: str, stop: asyncio.Event) -> int:
    """Send ``{"steady": n}`` on the entrypoint until ``stop`` (at least 300), then finish."""
    tx = await aqueduct.connect("127.0.0.1", port, cafile=cafile, timeout=TIMEOUT)
    sent = 0
    try:
        while (not stop.is_set() or sent < 300) and sent < 100_000:
            await tx.send({"steady": sent})
            sent += 1
            if sent % 10 == 0:
                await asyncio.sleep(0.01)  # a steady trickle, leaving the CPU to the fuzz
        await asyncio.wait_for(tx.finish(), TIMEOUT)  # returns once the server received all
    finally:
        await tx.connection.close()
    return sent


async def steady_connector(url: str, cafile: str, stop: asyncio.Event) -> int:
    """Stream connector messages until ``stop`` (at least 300); return how many, all acked."""
    sent = 0
    async with Connector(url, program=GOOD[0], instance=GOOD[1], cafile=cafile) as conn:
        stream = await conn.stream(1, "steady")
        while (not stop.is_set() or sent < 300) and sent < 100_000:
            await stream.send(b"steady-%d" % sent)
            sent += 1
            if sent % 10 == 0:
                await asyncio.sleep(0.01)  # a steady trickle, leaving the CPU to the fuzz
        await asyncio.wait_for(stream.wait_acked(sent), 3 * TIMEOUT)
    return sent


async def fuzz(
    port: int, cafile: str, rng: random.Random, well_behaved: Awaitable[int], stop: asyncio.Event
) -> tuple[list[Outcome], dict[str, int], int]:
    """Send every hostile input while ``well_behaved`` runs; return outcomes, mutations, its count."""
    streams, datagrams = stream_seeds(rng), datagram_seeds(rng)
    mutators = {False: Mutator(rng, corpus=streams), True: Mutator(rng, corpus=datagrams)}
    outcomes: list[Outcome] = []
    kinds: dict[str, int] = {}
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int) -> None:
        datagram = i >= STREAM_INPUTS
        kind, data = mutators[datagram].mutate(rng.choice(datagrams if datagram else streams))
        if datagram:
            data = data[:1000]  # must fit one QUIC datagram frame
        kinds[kind] = kinds.get(kind, 0) + 1
        o = Outcome(i, kind, datagram, decoder_error(data, datagram), None)
        outcomes.append(o)
        async with gate:
            await send_hostile(port, cafile, o, data)

    good = asyncio.ensure_future(well_behaved)
    try:
        await asyncio.gather(*(one(i) for i in range(STREAM_INPUTS + DATAGRAM_INPUTS)))
        stop.set()
        sent = await asyncio.wait_for(good, 4 * TIMEOUT)
    finally:
        good.cancel()
    return outcomes, kinds, sent


def record(figures: Figures, outcomes: list[Outcome], kinds: dict[str, int], loop_errors: list) -> list:
    """Fill the figures from the outcomes; return the problems found."""
    problems = [(o.index, o.kind, p) for o in outcomes if (p := problem(o)) is not None]
    figures.faults = {
        "hostile_stream_inputs": STREAM_INPUTS,
        "hostile_datagrams": DATAGRAM_INPUTS,
        "mutations": kinds,
    }
    figures.extra = {
        "closed_decoder_error": sum(1 for o in outcomes if o.expected is not None and o.closed),
        "closed_by_higher_layer": sum(1 for o in outcomes if o.expected is None and o.closed),
        "stayed_open": sum(1 for o in outcomes if o.closed is None),
        "problems": len(problems),
        "loop_errors": len(loop_errors),
    }
    return problems


async def test_aqueduct_server_survives_mutated_frames_and_keeps_serving(
    rng: random.Random, figures: Figures, loop_errors: list, certs
) -> None:
    server = await aqueduct.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key)
    app = PlainApp()
    acceptor = asyncio.ensure_future(app.accept(server))
    stop = asyncio.Event()
    try:
        good = steady_plain_client(server.port, str(certs.ca), stop)
        outcomes, kinds, sent = await fuzz(server.port, str(certs.ca), rng, good, stop)
    finally:
        await server.close()
        acceptor.cancel()
    problems = record(figures, outcomes, kinds, loop_errors)
    figures.count(tally({"steady": {i: i for i in range(sent)}}, (("steady", v, v) for v in app.values)))
    figures.extra["bad_payloads_skipped_by_app"] = app.bad_payloads

    assert not problems, problems[:5]
    assert not loop_errors, loop_errors[:3]
    assert app.values == list(range(sent))  # all there, once, in order
    assert figures.extra["closed_decoder_error"] > len(outcomes) // 4  # the fuzz reached the decoder


async def test_connector_worker_survives_mutated_aqueduct_frames(
    rng: random.Random, figures: Figures, loop_errors: list, certs
) -> None:
    from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct

    sink = MemorySink()
    server = await serve_aqueduct(
        "127.0.0.1", 0, sink, certfile=certs.server_cert, keyfile=certs.server_key
    )
    cafile = str(certs.ca)
    url = f"aqueduct://127.0.0.1:{server.port}"
    stop = asyncio.Event()
    try:
        good = steady_connector(url, cafile, stop)
        outcomes, kinds, sent = await fuzz(server.port, cafile, rng, good, stop)
        async with Connector(url, program="after", instance="a0", cafile=cafile) as conn:
            stream = await conn.stream(1, "after")
            for i in range(10):
                await stream.send(b"after-%d" % i)
            await asyncio.wait_for(stream.wait_acked(10), TIMEOUT)
    finally:
        await server.close()
    problems = record(figures, outcomes, kinds, loop_errors)
    delivered = sink.messages(*GOOD, 1)
    figures.count(tally({1: {i: b"steady-%d" % i for i in range(sent)}}, ((1, m.message_id, m.payload) for m in delivered)))

    assert not problems, problems[:5]
    assert not loop_errors, [c.get("exception") or c.get("message") for c in loop_errors[:3]]
    assert [m.payload for m in delivered] == [b"steady-%d" % i for i in range(sent)]
    assert sink.payloads("after", "a0", 1) == [b"after-%d" % i for i in range(10)]
