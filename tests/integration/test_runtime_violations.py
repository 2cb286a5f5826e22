"""Spec section 6 over real loopback QUIC: every protocol violation closes the connection.

A hand-driven aioquic peer (:class:`RawPeer`) completes a valid Aqueduct
handshake prefix with the ``aqueduct.wire`` encoders and then sends the
violating bytes, against a real ``aqueduct.serve`` server or (for the rules
only a server can break) against a real ``aqueduct.connect`` client. For each
violation we check what a user of either side sees:

* the QUIC connection is closed with application error code 1
  (PROTOCOL_VIOLATION) and a reason that names the frame and the rule;
* the Aqueduct side's ``Connection.close_reason`` says the same;
* a well-behaved connection to the same server, open the whole time, keeps
  working, and the messages it had already had acked are intact.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

import pytest
from aioquic.asyncio.client import connect as quic_connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import serve as quic_serve
from aioquic.quic import events as qe
from aioquic.quic.connection import QuicConnection

import aqueduct
from aqueduct.runtime.backends.tls import client_configuration, server_configuration
from aqueduct.runtime.handles.payload import CONNECTION_HEADERS
from aqueduct.wire.chanid import Side, make_chanid
from aqueduct.wire.frames import (
    AckNackUnreliable,
    AckReliable,
    AckVersion,
    AttachmentRef,
    CancelSender,
    ConnectionHeaders,
    Dequeued,
    FinishSender,
    ForgetChannel,
    Frame,
    MessageFrame,
    RouteTo,
    SentUnreliable,
    Version,
    encode_frame,
)
from aqueduct.wire.sequence import StreamSequenceDecoder, encode_sequence
from aqueduct.wire.varint import encode_varbytes, encode_varint
from tests.waiting import wait_until

TIMEOUT = 10.0  # only turns a hang into a failure
PROTOCOL_VIOLATION = 1
RAW_HEADERS = (*CONNECTION_HEADERS, ("role", b"raw"))
GOOD_HEADERS = {"role": "good"}
# A channel the client creates whose Sender the server holds (client attaches its Sender half).
SERVER_SENDS = make_chanid(Side.CLIENT, Side.SERVER, False, 0)
# A channel the client creates and sends on.
CLIENT_SENDS = make_chanid(Side.CLIENT, Side.CLIENT, False, 1)


def msg(num: int, attachments: Sequence[int] = (), payload: bytes = b"\xf6") -> MessageFrame:
    """A MESSAGE frame (payload: CBOR null) attaching ``attachments`` without headers."""
    return MessageFrame(num, (), tuple(AttachmentRef(c, ()) for c in attachments), payload)


bounded = functools.partial(wait_until, timeout=TIMEOUT)


# ---------------------------------------------------------------- the raw peer


class RawPeer(QuicConnectionProtocol):
    """An aioquic endpoint that speaks Aqueduct by hand: it sends exactly the bytes it is given.

    It decodes what the real peer sends (to know when the handshake is done
    and to see echoes) and records how the connection ended. As a server it
    answers the client's first sequence with ``opening`` (a valid server
    prefix unless a test says otherwise).
    """

    def __init__(self, quic: QuicConnection, stream_handler: object = None) -> None:
        super().__init__(quic)
        self.frames: list[Frame] = []
        self.opening: bytes = encode_sequence(
            [Version(), AckVersion(), ConnectionHeaders(CONNECTION_HEADERS)]
        )
        self.closed: asyncio.Future[qe.ConnectionTerminated] = self._loop.create_future()
        self._decoders: dict[int, StreamSequenceDecoder] = {}
        self._opened = False

    def quic_event_received(self, event: qe.QuicEvent) -> None:
        if isinstance(event, qe.StreamDataReceived):
            decoder = self._decoders.setdefault(event.stream_id, StreamSequenceDecoder())
            with contextlib.suppress(ValueError):
                self.frames.extend(decoder.feed(event.data))
            if not self._quic.configuration.is_client and not self._opened:
                self._opened = True
                self.send_stream(self.opening)
        elif isinstance(event, qe.ConnectionTerminated) and not self.closed.done():
            self.closed.set_result(event)
        super().quic_event_received(event)

    def saw(self, frame: Frame) -> bool:
        return frame in self.frames

    def send_stream(self, data: bytes, end: bool = True, bidirectional: bool = False) -> int:
        sid = self._quic.get_next_available_stream_id(is_unidirectional=not bidirectional)
        self._quic.send_stream_data(sid, data, end_stream=end)
        self.transmit()
        return sid

    def send(self, frames: Sequence[Frame]) -> int:
        """One frame sequence on a new unidirectional stream (FIN after it)."""
        return self.send_stream(encode_sequence(frames))

    def send_datagram(self, data: bytes) -> None:
        self._quic.send_datagram_frame(data)
        self.transmit()

    async def violation(self) -> str:
        """Wait for the peer's close; assert it is PROTOCOL_VIOLATION; return its reason."""
        event = await asyncio.wait_for(self.closed, TIMEOUT)
        assert event.error_code == PROTOCOL_VIOLATION, event
        assert event.frame_type is None  # an application close, not a transport error
        return event.reason_phrase


# ---------------------------------------------------------------- the world


@dataclass
class World:
    """A real server, one well-behaved client on it, and the raw connections it accepted."""

    certs: object
    server: aqueduct.Server
    good_tx: aqueduct.Sender
    good_received: list[object] = field(default_factory=list)
    raw_accepted: asyncio.Queue[aqueduct.ServerConnection] = field(default_factory=asyncio.Queue)
    good_sent: int = 0

    async def good_traffic(self, n: int) -> None:
        """The good client sends ``n`` more messages; wait until each is acked and arrived."""
        for _ in range(n):
            await self.good_tx.send({"good": self.good_sent})
            self.good_sent += 1
        await bounded(lambda: self.good_tx.stats().get("acked", 0) == self.good_sent, "good acks")
        await bounded(lambda: len(self.good_received) == self.good_sent, "good messages")

    async def check_good_unharmed(self) -> None:
        """The parallel connection is still open, kept its messages, and still works."""
        before = self.good_sent
        assert not self.good_tx.connection.is_closed
        assert self.good_received == [{"good": i} for i in range(before)]
        await self.good_traffic(3)
        assert self.good_received == [{"good": i} for i in range(before + 3)]
        assert self.good_tx.stats()["acked"] == before + 3

    @contextlib.asynccontextmanager
    async def raw_client(self, handshake: bool = True) -> AsyncIterator[RawPeer]:
        """A raw client; with ``handshake`` it has sent VERSION + CONNECTION_HEADERS and got the reply."""
        config = client_configuration("localhost", self.certs.ca, True, None, None)
        async with quic_connect(
            "127.0.0.1", self.server.port, configuration=config, create_protocol=RawPeer
        ) as raw:
            assert isinstance(raw, RawPeer)
            if handshake:
                raw.send([Version(), ConnectionHeaders(RAW_HEADERS)])
                await bounded(lambda: any(isinstance(f, ConnectionHeaders) for f in raw.frames), "server headers")
                raw.send([AckVersion()])  # we got the server's VERSION: it may drop it now
            yield raw

    async def accepted(self) -> aqueduct.ServerConnection:
        return await asyncio.wait_for(self.raw_accepted.get(), TIMEOUT)


@pytest.fixture
async def world(certs) -> AsyncIterator[World]:
    # A short ack delay only makes the good connection's acks (which the tests wait for) come sooner.
    server = await aqueduct.serve(
        "127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key, ack_delay=0.01
    )
    good_tx = await aqueduct.connect(
        "127.0.0.1", server.port, cafile=certs.ca, headers=GOOD_HEADERS, timeout=TIMEOUT
    )
    w = World(certs, server, good_tx)
    readers: list[asyncio.Task[None]] = []

    async def read_good(conn: aqueduct.ServerConnection) -> None:
        with contextlib.suppress(aqueduct.ConnectionLost):
            async for value in conn.entrypoint:
                w.good_received.append(value)

    async def accept_loop() -> None:
        async for conn in server:
            if ("role", b"good") in conn.peer_headers:
                readers.append(asyncio.create_task(read_good(conn)))
            else:
                w.raw_accepted.put_nowait(conn)

    loop = asyncio.get_running_loop()
    loop_errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: loop_errors.append(context))
    acceptor = asyncio.create_task(accept_loop())
    await w.good_traffic(3)  # acked before any violation happens
    try:
        yield w
    finally:
        await good_tx.connection.close()
        await server.close()
        await asyncio.wait_for(acceptor, TIMEOUT)
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        loop.set_exception_handler(None)
    # No callback or task of either endpoint died on the bad input.
    assert loop_errors == []


async def ending(rx: aqueduct.Receiver) -> Exception:
    """Read ``rx`` to its end (buffered messages stay readable); return the outcome raised."""
    for _ in range(100):
        try:
            await asyncio.wait_for(rx.recv(), TIMEOUT)
        except aqueduct.AqueductError as outcome:
            return outcome
    pytest.fail("the receiver never ended")


async def assert_server_side(
    conn: aqueduct.ServerConnection, reason: str, outcome: type[Exception] = aqueduct.ConnectionLost
) -> None:
    """The server's own view of the raw connection: closed with code 1, same reason."""
    await asyncio.wait_for(conn.wait_closed(), TIMEOUT)
    lost = conn.close_reason
    assert lost is not None and lost.code == PROTOCOL_VIOLATION
    assert lost.reason == reason
    assert isinstance(lost.__cause__, aqueduct.RemoteProtocolError)
    assert isinstance(await ending(conn.entrypoint), outcome)


# ---------------------------------------------------------------- client -> server violations

ROUTE0 = encode_frame(RouteTo(0))


@dataclass(frozen=True)
class Case:
    """Bytes a raw client sends after the handshake, and what the close reason must contain."""

    id: str
    send: Callable[[RawPeer], None]
    expect: tuple[str, ...]
    outcome: type[Exception] = aqueduct.ConnectionLost  # how the entrypoint Receiver ends


def stream(*frames: Frame) -> Callable[[RawPeer], None]:
    return lambda raw: raw.send(frames)


def raw_stream(data: bytes, bidirectional: bool = False) -> Callable[[RawPeer], None]:
    return lambda raw: raw.send_stream(data, bidirectional=bidirectional)


def datagram(data: bytes, copies: int = 1) -> Callable[[RawPeer], None]:
    def send(raw: RawPeer) -> None:
        for _ in range(copies):
            raw.send_datagram(data)

    return send


TRUNCATED_MESSAGE = ROUTE0 + encode_frame(msg(0, payload=b"hello"))[:-2]
# varint(0) MESSAGE_NUM, then a header data length one over 64 KiB (the body never comes)
HEADERS_OVER_LIMIT = ROUTE0 + b"\x04\x00" + encode_varint(64 * 1024 + 1)
# MESSAGE_NUM 0, no headers, no attachments, then a payload length one over 16 MiB
PAYLOAD_OVER_LIMIT = ROUTE0 + b"\x04\x00\x00\x00" + encode_varint(16 * 1024 * 1024 + 1)
ACK_ZERO_LENGTH = ROUTE0 + b"\x08" + encode_varbytes(encode_varint(0) + encode_varint(0))
# 9 bytes with every high bit set: the 9th byte carries bits 56..63 whole, so the
# varint ends there; a 10th "continuation" byte 0x80 is read as the next frame's tag.
VARINT_OVER_64_BITS = b"\x03" + b"\xff" * 9 + b"\x80"

SERVER_CASES = [
    Case("malformed-ack-ranges", raw_stream(ACK_ZERO_LENGTH), ("ACK_RELIABLE: range lengths must be non-zero",)),
    Case("malformed-truncated-at-fin", raw_stream(TRUNCATED_MESSAGE), ("MESSAGE: payload length 5, only 3 bytes present",)),
    Case("malformed-version-magic", raw_stream(b"\xef" + b"\x00" * 15), ("VERSION: magic bytes differ",)),
    Case(
        "trailing-bytes-datagram",
        datagram(encode_sequence([RouteTo(0), msg(0)]) + b"\x00"),
        ("datagram: 1 bytes after the MESSAGE",),
    ),
    Case("unknown-tag", raw_stream(b"\x0d"), ("UNKNOWN: tag 13 is not a frame",)),
    Case("version-after-route-to", raw_stream(ROUTE0 + encode_frame(Version())), ("sequence: VERSION after ROUTE_TO",)),
    Case("second-route-to", raw_stream(ROUTE0 + encode_frame(RouteTo(8))), ("sequence: a second ROUTE_TO",)),
    Case(
        "routed-frame-without-route-to",
        raw_stream(encode_frame(msg(0))),
        ("sequence: MESSAGE outside a ROUTE_TO context",),
    ),
    Case(
        "receiver-frame-from-the-sender",
        stream(RouteTo(0), AckReliable((0, 1))),
        ("ACK_RELIABLE: only the receiver side may send it",),
    ),
    Case(
        "sender-frame-from-the-receiver",
        stream(RouteTo(SERVER_SENDS), msg(0)),
        ("MESSAGE: only the sender side may send it", f"channel {SERVER_SENDS}"),
    ),
    Case(
        "attachment-with-server-creator",
        stream(RouteTo(0), msg(0, [make_chanid(Side.SERVER, Side.CLIENT, False, 0)])),
        ("MESSAGE: attachment 1 has CREATOR server, but the frame's sender is the client",),
    ),
    Case(
        "attachment-of-the-entrypoint",
        stream(RouteTo(0), msg(0, [0])),
        ("MESSAGE: attachment 0 is an existing channel",),
    ),
    Case(
        "attachment-of-an-attached-channel",
        stream(RouteTo(0), msg(0, [CLIENT_SENDS]), msg(1, [CLIENT_SENDS])),
        (f"MESSAGE: attachment {CLIENT_SENDS} is an existing channel",),
    ),
    Case(
        "duplicate-message-number",
        stream(RouteTo(0), msg(3), msg(3)),
        ("MESSAGE: duplicate message number 3",),
    ),
    Case(
        "duplicate-unreliable-number",
        datagram(encode_sequence([RouteTo(0), msg(2)]), copies=2),
        ("MESSAGE: duplicate unreliable message number 2",),
    ),
    Case(
        "finish-below-a-received-number",
        stream(RouteTo(0), msg(5), FinishSender(3)),
        ("FINISH_SENDER: SENT_RELIABLE 3",),
    ),
    Case(
        "message-at-sent-reliable",
        stream(RouteTo(0), FinishSender(2), msg(2)),
        ("MESSAGE:", "at or past SENT_RELIABLE 2"),
    ),
    Case(
        "sent-unreliable-after-finish",
        stream(RouteTo(0), msg(0), FinishSender(2), SentUnreliable(1)),
        ("SENT_UNRELIABLE: after FINISH_SENDER",),
    ),
    Case(
        "second-finish",
        stream(RouteTo(0), FinishSender(1), FinishSender(1)),
        ("FINISH_SENDER:", "a second FINISH_SENDER"),
    ),
    Case(
        "second-cancel",
        stream(RouteTo(0), CancelSender(), CancelSender()),
        ("CANCEL_SENDER: channel 0 already got FINISH_SENDER or CANCEL_SENDER",),
        aqueduct.Cancelled,  # the first CANCEL_SENDER was legal and reached the application
    ),
    Case(
        "cancel-after-finish",
        stream(RouteTo(0), FinishSender(1), CancelSender()),
        ("CANCEL_SENDER: after FINISH_SENDER",),
    ),
    Case("varint-over-64-bits", raw_stream(VARINT_OVER_64_BITS), ("UNKNOWN: tag 128 is not a frame",)),
    Case(
        "bidirectional-stream",
        raw_stream(encode_sequence([RouteTo(0), msg(0)]), bidirectional=True),
        ("stream 0: bidirectional streams are not used by Aqueduct",),
    ),
    Case(
        "header-data-over-limit",
        raw_stream(HEADERS_OVER_LIMIT),
        ("MESSAGE: header data length 65537 exceeds the limit of 65536 bytes",),
    ),
    Case(
        "payload-over-limit",
        raw_stream(PAYLOAD_OVER_LIMIT),
        ("MESSAGE:", "16777217 exceeds the limit of 16777216 bytes"),
    ),
]


@pytest.mark.parametrize("case", SERVER_CASES, ids=[c.id for c in SERVER_CASES])
async def test_client_violation_closes_only_its_connection(world: World, case: Case) -> None:
    async with world.raw_client() as raw:
        conn = await world.accepted()
        case.send(raw)
        reason = await raw.violation()
        for part in case.expect:
            assert part in reason, (part, reason)
        await assert_server_side(conn, reason, case.outcome)
    await world.check_good_unharmed()


@pytest.mark.parametrize(
    ("frame", "expect"),
    [
        (AckReliable((0, 2)), f"ACK_RELIABLE: acks message 1 of channel {SERVER_SENDS}, but only 0"),
        (
            AckNackUnreliable((0, 3)),
            f"ACK_NACK_UNRELIABLE: covers unreliable message 2 of channel {SERVER_SENDS}, but only 0",
        ),
        (Dequeued(5), f"DEQUEUED: 5 bytes reported on channel {SERVER_SENDS}, more than were outstanding"),
    ],
    ids=["ack-never-sent", "nack-never-sent", "dequeued-never-sent"],
)
async def test_acks_of_numbers_the_server_never_sent(world: World, frame: Frame, expect: str) -> None:
    # The raw client attaches a channel whose Sender the server holds; the server
    # echoes it (ROUTE_TO) and sends nothing on it; acks for it are then lies.
    async with world.raw_client() as raw:
        conn = await world.accepted()
        raw.send([RouteTo(0), msg(0, [SERVER_SENDS])])
        message = await asyncio.wait_for(conn.entrypoint.recv_message(), TIMEOUT)
        (reply,) = message.attachments  # the payload is CBOR null; the Sender rides alongside
        assert isinstance(reply, aqueduct.Sender)
        await bounded(lambda: raw.saw(RouteTo(SERVER_SENDS)), "the server's ROUTE_TO echo")
        raw.send([RouteTo(SERVER_SENDS), frame])
        reason = await raw.violation()
        assert expect in reason
        await assert_server_side(conn, reason)
        with pytest.raises(aqueduct.ConnectionLost):
            await asyncio.wait_for(reply.send("to a peer that broke the rules"), TIMEOUT)
    await world.check_good_unharmed()


@pytest.mark.parametrize(
    ("first", "expect"),
    [
        (
            encode_sequence([ConnectionHeaders(RAW_HEADERS)]),
            "CONNECTION_HEADERS: a sequence must start with VERSION until ACK_VERSION was sent",
        ),
        (encode_sequence([Version("9.9.9"), ConnectionHeaders(RAW_HEADERS)]), "VERSION:"),
    ],
    ids=["sequence-without-version", "wrong-version-string"],
)
async def test_bad_opening_sequence_closes_the_connection(world: World, first: bytes, expect: str) -> None:
    async with world.raw_client(handshake=False) as raw:
        raw.send_stream(first)
        reason = await raw.violation()
        assert expect in reason
        if b"9.9.9" in first:
            assert "9.9.9" in reason and "0.0.0-AFTER" in reason  # names both versions
    assert world.raw_accepted.empty()  # never became an Aqueduct connection
    await world.check_good_unharmed()


async def test_datagram_without_version_before_ack_version(world: World) -> None:
    async with world.raw_client(handshake=False) as raw:
        raw.send_datagram(encode_sequence([RouteTo(0), msg(0)]))
        reason = await raw.violation()
        assert "ROUTE_TO: a sequence must start with VERSION until ACK_VERSION was sent" in reason
    await world.check_good_unharmed()


# ---------------------------------------------------------------- not violations (spec section 5)


async def test_route_to_an_unknown_server_channel_is_answered_with_forget(world: World) -> None:
    # A server-created chanid the server never allocated: FORGET_CHANNEL, and
    # the rest of that sequence (even a duplicate number) is ignored.
    unknown = make_chanid(Side.SERVER, Side.CLIENT, False, 7)
    async with world.raw_client() as raw:
        conn = await world.accepted()
        raw.send([RouteTo(unknown), msg(0), msg(0)])
        await bounded(lambda: raw.saw(ForgetChannel()) and raw.saw(RouteTo(unknown)), "FORGET_CHANNEL")
        raw.send([RouteTo(0), msg(0, payload=b"\x01")])
        assert await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT) == 1  # still up
        assert unknown not in conn.core.channels
        assert not raw.closed.done()


async def test_frames_for_a_destroyed_channel_are_ignored(world: World) -> None:
    # Remote-created channels stay destroyed: no re-creation, no violation.
    async with world.raw_client() as raw:
        conn = await world.accepted()
        raw.send([RouteTo(0), msg(0, [CLIENT_SENDS])])
        message = await asyncio.wait_for(conn.entrypoint.recv_message(), TIMEOUT)
        (rx,) = message.attachments
        raw.send([RouteTo(CLIENT_SENDS), msg(0), FinishSender(1)])
        assert await asyncio.wait_for(rx.recv(), TIMEOUT) is None
        with pytest.raises(aqueduct.Finished):
            await asyncio.wait_for(rx.recv(), TIMEOUT)
        assert CLIENT_SENDS not in conn.core.channels
        raw.send([RouteTo(CLIENT_SENDS), msg(5)])  # after the end: ignored
        raw.send([RouteTo(0), msg(1, payload=b"\x02")])
        assert await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT) == 2
        assert CLIENT_SENDS not in conn.core.channels
        assert not raw.closed.done()


# ---------------------------------------------------------------- server -> client violations


@contextlib.asynccontextmanager
async def raw_server(certs, opening: bytes | None = None) -> AsyncIterator[tuple[int, asyncio.Queue[RawPeer]]]:
    """A raw QUIC server on a free port; yields (port, queue of its connections)."""
    peers: asyncio.Queue[RawPeer] = asyncio.Queue()

    def create(quic: QuicConnection, stream_handler: object = None) -> RawPeer:
        peer = RawPeer(quic)
        if opening is not None:
            peer.opening = opening
        peers.put_nowait(peer)
        return peer

    config = server_configuration(certs.server_cert, certs.server_key)
    server = await quic_serve("127.0.0.1", 0, configuration=config, create_protocol=create)
    try:
        yield server._transport.get_extra_info("sockname")[1], peers
    finally:
        server.close()


async def assert_client_side(tx: aqueduct.Sender, reason: str) -> None:
    """The aqueduct client's own view: closed with code 1, same reason, handles fail."""
    conn = tx.connection
    await asyncio.wait_for(conn.wait_closed(), TIMEOUT)
    lost = conn.close_reason
    assert lost is not None and lost.code == PROTOCOL_VIOLATION and lost.reason == reason
    with pytest.raises(aqueduct.ConnectionLost):
        await tx.send("after the violation")


OPENINGS = {
    "sequence-without-version": (
        encode_sequence([AckVersion(), ConnectionHeaders(CONNECTION_HEADERS)]),
        ("ACK_VERSION: a sequence must start with VERSION until ACK_VERSION was sent",),
    ),
    "wrong-version-string": (
        encode_sequence([Version("9.9.9"), AckVersion(), ConnectionHeaders(CONNECTION_HEADERS)]),
        ("VERSION:", "9.9.9", "0.0.0-AFTER"),
    ),
}


@pytest.mark.parametrize("name", list(OPENINGS))
async def test_client_refuses_a_bad_server_opening(world: World, name: str) -> None:
    opening, expect = OPENINGS[name]
    async with raw_server(world.certs, opening) as (port, peers):
        with pytest.raises(aqueduct.ConnectionLost) as lost:
            await aqueduct.connect("127.0.0.1", port, cafile=world.certs.ca, timeout=TIMEOUT)
        peer = await asyncio.wait_for(peers.get(), TIMEOUT)
        reason = await peer.violation()
        for part in expect:
            assert part in reason, (part, reason)
        assert lost.value.code == PROTOCOL_VIOLATION and lost.value.reason == reason
    await world.check_good_unharmed()


CLIENT_CASES = [
    Case(
        "message-from-the-receiver-side",
        stream(RouteTo(0), msg(0)),
        ("MESSAGE: only the sender side may send it", "channel 0"),
    ),
    Case(
        "ack-never-sent",
        stream(RouteTo(0), AckReliable((0, 3))),
        ("ACK_RELIABLE: acks message 2 of channel 0, but only 1 reliable messages were sent",),
    ),
    Case(
        "attachment-with-client-creator",
        stream(RouteTo(SERVER_SENDS), msg(0, [make_chanid(Side.CLIENT, Side.CLIENT, False, 9)])),
        (f"MESSAGE: attachment {make_chanid(Side.CLIENT, Side.CLIENT, False, 9)} has CREATOR client, "
         "but the frame's sender is the server",),
    ),
    Case(
        "forget-from-a-non-creator",
        stream(RouteTo(SERVER_SENDS), ForgetChannel()),
        (f"FORGET_CHANNEL: only the creator may send it, and we created channel {SERVER_SENDS}",),
    ),
    Case(
        "duplicate-message-number",
        stream(RouteTo(SERVER_SENDS), msg(0), msg(0)),
        ("MESSAGE: duplicate message number 0",),
    ),
    Case("unknown-tag", raw_stream(b"\xc8"), ("UNKNOWN: tag 200 is not a frame",)),
    Case(
        "bidirectional-stream",
        raw_stream(encode_sequence([RouteTo(0), msg(0)]), bidirectional=True),
        ("stream 1: bidirectional streams are not used by Aqueduct",),
    ),
]


@pytest.mark.parametrize("case", CLIENT_CASES, ids=[c.id for c in CLIENT_CASES])
async def test_server_violation_closes_the_client_connection(world: World, case: Case) -> None:
    async with raw_server(world.certs) as (port, peers):
        tx = await aqueduct.connect("127.0.0.1", port, cafile=world.certs.ca, timeout=TIMEOUT)
        peer = await asyncio.wait_for(peers.get(), TIMEOUT)
        # One message on the entrypoint carrying a Sender: the raw server now
        # "holds" the Sender of SERVER_SENDS (the client's first such channel).
        reply_tx, reply_rx = aqueduct.channel()
        await tx.send({"reply": reply_tx})
        await bounded(lambda: any(isinstance(f, MessageFrame) for f in peer.frames), "the client's message")
        case.send(peer)
        reason = await peer.violation()
        for part in case.expect:
            assert part in reason, (part, reason)
        await assert_client_side(tx, reason)
        assert isinstance(await ending(reply_rx), aqueduct.ConnectionLost)
    await world.check_good_unharmed()


async def test_nack_of_an_unreliable_number_never_sent_closes_the_client(world: World) -> None:
    async with raw_server(world.certs) as (port, peers):
        tx = await aqueduct.connect("127.0.0.1", port, cafile=world.certs.ca, timeout=TIMEOUT)
        peer = await asyncio.wait_for(peers.get(), TIMEOUT)
        tx.unreliable()
        await tx.send("one datagram")  # unreliable number 0 is the only one
        peer.send([RouteTo(0), AckNackUnreliable((1, 2))])
        reason = await peer.violation()
        assert "ACK_NACK_UNRELIABLE: covers unreliable message 2 of channel 0, but only 1 were sent" in reason
        await assert_client_side(tx, reason)
    await world.check_good_unharmed()
