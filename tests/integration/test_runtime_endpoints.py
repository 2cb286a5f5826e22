"""Endpoints over loopback QUIC: TLS and mutual TLS, headers, middleware, stats, frame log."""

from __future__ import annotations

import asyncio
import json

import pytest
from aioquic.asyncio.client import connect as quic_connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import serve as quic_serve
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import StreamDataReceived

import aqueduct
from aqueduct.runtime.certs import generate_certs
from aqueduct.wire.frames import ConnectionHeaders, Version, encode_frame

TIMEOUT = 30


async def test_headers_both_ways_per_connection_message_and_channel(certs):
    seen_incoming = []

    def stamp(ctx):  # client middleware: add a header to everything it sends
        if ctx.direction == "outgoing":
            ctx.headers.append(("x-stamp", b"client"))

    def record(ctx):  # server middleware: observe and extend incoming headers
        if ctx.direction == "incoming":
            seen_incoming.append(dict(ctx.headers))
            ctx.headers.append(("x-checked", b"yes"))

    server = await aqueduct.serve(
        "127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key,
        headers={"server-name": "test-server"}, middleware=[record],
    )
    async with server:
        tx = await aqueduct.connect(
            "127.0.0.1", server.port, cafile=certs.ca,
            headers={"client-id": "c1"}, middleware=[stamp],
        )
        async with tx:
            conn = await asyncio.wait_for(server.accept(), TIMEOUT)
            assert ("client-id", b"c1") in conn.peer_headers
            assert ("content-type", b"application/cbor") in conn.peer_headers
            assert ("server-name", b"test-server") in tx.connection.peer_headers

            reply_tx, reply_rx = aqueduct.channel(headers={"purpose": "replies"})
            await tx.send({"reply": reply_tx}, headers={"trace": "t-1"})
            msg = await asyncio.wait_for(conn.entrypoint.recv_message(), TIMEOUT)
            assert dict(msg.headers)["trace"] == b"t-1"
            assert dict(msg.headers)["x-stamp"] == b"client"
            assert seen_incoming[0]["trace"] == b"t-1"
            assert dict(msg.headers)["x-checked"] == b"yes"
            reply = msg.value["reply"]
            assert msg.attachments == (reply,)
            assert reply.headers == (("purpose", b"replies"),)

            await reply.send(b"raw reply", headers={"k": b"v"})
            back = await asyncio.wait_for(reply_rx.recv_message(), TIMEOUT)
            assert back.value == b"raw reply" and dict(back.headers)["k"] == b"v"


async def test_client_announcing_raw_default_sends_both_kinds(certs):
    server = await aqueduct.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key)
    async with server:
        tx = await aqueduct.connect(
            "127.0.0.1", server.port, cafile=certs.ca,
            headers={"content-type": "application/octet-stream"},
        )
        async with tx:
            conn = await asyncio.wait_for(server.accept(), TIMEOUT)
            await tx.send(b"raw")
            await tx.send({"cbor": [1, 2]})
            first = await asyncio.wait_for(conn.entrypoint.recv_message(), TIMEOUT)
            second = await asyncio.wait_for(conn.entrypoint.recv_message(), TIMEOUT)
            assert (first.value, first.headers) == (b"raw", ())
            assert second.value == {"cbor": [1, 2]}


async def test_an_empty_raw_message_alone_is_sent(certs):
    """Under an octet-stream default b"" is a zero-byte payload: it is still a
    message, sent and received (the send coalescer counts messages, not bytes)."""
    server = await aqueduct.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key)
    async with server:
        tx = await aqueduct.connect(
            "127.0.0.1", server.port, cafile=certs.ca,
            headers={"content-type": "application/octet-stream"},
        )
        async with tx:
            conn = await asyncio.wait_for(server.accept(), TIMEOUT)
            await tx.send(b"")
            assert await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT) == b""


async def test_mutual_tls_accepts_a_client_certificate_from_the_ca(certs):
    server = await aqueduct.serve(
        "127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key, cafile=certs.ca
    )
    async with server:
        tx = await aqueduct.connect(
            "127.0.0.1", server.port, cafile=certs.ca,
            certfile=certs.client_cert, keyfile=certs.client_key,
        )
        async with tx:
            await tx.send("authenticated")
            conn = await asyncio.wait_for(server.accept(), TIMEOUT)
            assert await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT) == "authenticated"


async def test_mutual_tls_refuses_clients_without_a_valid_certificate(certs, tmp_path):
    stranger = generate_certs(tmp_path / "other-ca")
    server = await aqueduct.serve(
        "127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key, cafile=certs.ca
    )
    async with server:
        with pytest.raises(aqueduct.ConnectionLost, match="certificate"):
            await aqueduct.connect("127.0.0.1", server.port, cafile=certs.ca, timeout=TIMEOUT)
        with pytest.raises(aqueduct.ConnectionLost, match="certificate"):
            await aqueduct.connect(
                "127.0.0.1", server.port, cafile=certs.ca, timeout=TIMEOUT,
                certfile=stranger.client_cert, keyfile=stranger.client_key,
            )


async def test_client_refuses_a_server_it_cannot_verify(certs, tmp_path):
    stranger = generate_certs(tmp_path / "other-ca")
    server = await aqueduct.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key)
    async with server:
        with pytest.raises(aqueduct.ConnectionLost):
            await aqueduct.connect("127.0.0.1", server.port, cafile=stranger.ca, timeout=TIMEOUT)


async def test_server_refuses_a_peer_without_datagram_support(certs):
    server = await aqueduct.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key)
    async with server:
        config = QuicConfiguration(is_client=True, alpn_protocols=["aqueduct"])
        config.load_verify_locations(cafile=str(certs.ca))
        async with quic_connect("127.0.0.1", server.port, configuration=config) as client:
            await asyncio.wait_for(client.wait_closed(), TIMEOUT)
            assert "datagram" in client._quic._close_event.reason_phrase


async def test_client_refuses_a_server_without_datagram_support(certs):
    config = QuicConfiguration(is_client=False, alpn_protocols=["aqueduct"])
    config.load_cert_chain(certs.server_cert, certs.server_key)
    plain = await quic_serve("127.0.0.1", 0, configuration=config)
    try:
        port = plain._transport.get_extra_info("sockname")[1]
        with pytest.raises(aqueduct.ConnectionLost, match="datagram"):
            await aqueduct.connect("127.0.0.1", port, cafile=certs.ca, timeout=TIMEOUT)
    finally:
        plain.close()


async def test_a_bidirectional_stream_from_the_peer_closes_the_connection(certs):
    server = await aqueduct.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key)
    async with server:
        config = QuicConfiguration(
            is_client=True, alpn_protocols=["aqueduct"], max_datagram_frame_size=65536
        )
        config.load_verify_locations(cafile=str(certs.ca))
        async with quic_connect("127.0.0.1", server.port, configuration=config) as client:
            reader, writer = await client.create_stream()  # bidirectional
            writer.write(b"\x01")
            await asyncio.wait_for(client.wait_closed(), TIMEOUT)
            close = client._quic._close_event
            assert close.error_code == 1 and "bidirectional" in close.reason_phrase


class _RawClient(QuicConnectionProtocol):
    """A hand-driven peer: writes raw Aqueduct bytes, notes when the server answered."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.answered = asyncio.Event()

    def quic_event_received(self, event):
        if isinstance(event, StreamDataReceived):
            self.answered.set()


async def test_peer_violation_surfaces_as_connection_lost_caused_by_remote_error(certs):
    server = await aqueduct.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key)
    async with server:
        config = QuicConfiguration(
            is_client=True, alpn_protocols=["aqueduct"], max_datagram_frame_size=65536
        )
        config.load_verify_locations(cafile=str(certs.ca))
        async with quic_connect(
            "127.0.0.1", server.port, configuration=config, create_protocol=_RawClient
        ) as client:
            sid = client._quic.get_next_available_stream_id(is_unidirectional=True)
            hello = encode_frame(Version()) + encode_frame(
                ConnectionHeaders((("content-type", b"application/cbor"),))
            )
            client._quic.send_stream_data(sid, hello)
            client.transmit()
            conn = await asyncio.wait_for(server.accept(), TIMEOUT)
            await asyncio.wait_for(client.answered.wait(), TIMEOUT)
            client._quic.send_stream_data(sid, b"\x0d")  # no frame has tag 13
            client.transmit()
            with pytest.raises(aqueduct.ConnectionLost) as lost:
                await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT)
            assert lost.value.code == 1
            assert isinstance(lost.value.__cause__, aqueduct.RemoteProtocolError)
            await asyncio.wait_for(client.wait_closed(), TIMEOUT)


async def test_stats_and_frame_log(certs, tmp_path):
    log_path = tmp_path / "frames.jsonl"
    server = await aqueduct.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key)
    async with server:
        tx = await aqueduct.connect("127.0.0.1", server.port, cafile=certs.ca, frame_log=log_path)
        async with tx:
            conn = await asyncio.wait_for(server.accept(), TIMEOUT)
            for i in range(5):
                await tx.send(i)
            for _ in range(5):
                await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT)
            stats = tx.connection.stats()
            assert stats["messages_sent"] >= 5
            assert stats["quic"]["packets_sent"] >= 1  # (the 5 messages may share a packet)
            assert tx.stats()["messages_sent"] >= 5
            assert conn.stats()["messages_received"] >= 5
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    sent = [line["data"]["frame"] for line in lines if line["name"] == "aqueduct:frame_sent"]
    received = [line["data"]["frame"] for line in lines if line["name"] == "aqueduct:frame_received"]
    assert sent.count("MESSAGE") >= 5 and "FINISH_SENDER" in sent
    assert "VERSION" in received and "CONNECTION_HEADERS" in received
    assert lines[-1]["name"] == "aqueduct:connection_terminated"


async def test_frame_log_from_environment_variable(certs, tmp_path, monkeypatch):
    monkeypatch.setenv("AQUEDUCT_FRAME_LOG", str(tmp_path / "aq-{side}.jsonl"))
    server = await aqueduct.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key)
    async with server:
        tx = await aqueduct.connect("127.0.0.1", server.port, cafile=certs.ca)
        async with tx:
            await tx.send("logged")
            conn = await asyncio.wait_for(server.accept(), TIMEOUT)
            assert await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT) == "logged"
    for side in ("client", "server"):
        names = {json.loads(line)["name"] for line in (tmp_path / f"aq-{side}.jsonl").read_text().splitlines()}
        assert {"aqueduct:frame_sent", "aqueduct:frame_received"} <= names
