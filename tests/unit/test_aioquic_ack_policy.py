"""The acknowledgement policy on an established aioquic connection (``aioquic_internals.delay_acks``).

Two real aioquic connections exchange datagrams in memory on a clock the
test moves, so when each ACK goes out, and in which packet, is decided by
the policy alone. What a user gets: a record's round trip costs fewer
packets (docs/performance.md, "What a connected fleet costs"), and a bulk
transfer is still acked every other packet.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from aioquic import tls
from aioquic.buffer import Buffer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.packet_builder import QuicPacketBuilder

from aqueduct.runtime.backends import aioquic_internals
from aqueduct.runtime.backends.aioquic_internals import ACK_DELAY
from aqueduct.runtime.certs import generate_certs
from bench.packets_per_record import frame_name

ADDR = ("127.0.0.1", 4433)


class BuiltDatagrams:
    """The frame types of every datagram aioquic builds while installed, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.datagrams: list[list[str]] = []
        start_frame, flush = QuicPacketBuilder.start_frame, QuicPacketBuilder.flush
        current: list[str] = []

        def counted(builder: QuicPacketBuilder, frame_type: int, *args: object, **kwargs: object) -> Buffer:
            current.append(frame_name(frame_type))
            return start_frame(builder, frame_type, *args, **kwargs)

        def flushed(builder: QuicPacketBuilder) -> tuple[list[bytes], list[object]]:
            datagrams, packets = flush(builder)
            self.datagrams.extend(list(current) for _ in datagrams)  # one packet per datagram here
            current.clear()
            return datagrams, packets

        monkeypatch.setattr(QuicPacketBuilder, "start_frame", counted)
        monkeypatch.setattr(QuicPacketBuilder, "flush", flushed)


class Pair:
    """A client and a server connection, handshaken, on a clock at ``now``."""

    def __init__(self, certs_dir: Path, built: BuiltDatagrams) -> None:
        certs = generate_certs(certs_dir)
        client_config = QuicConfiguration(is_client=True, alpn_protocols=["aq"], max_datagram_frame_size=65536)
        client_config.load_verify_locations(str(certs.ca))
        server_config = QuicConfiguration(is_client=False, alpn_protocols=["aq"], max_datagram_frame_size=65536)
        server_config.load_cert_chain(str(certs.server_cert), str(certs.server_key))
        self.built = built
        self.now = 1.0
        self.client = QuicConnection(configuration=client_config)
        self.server = QuicConnection(
            configuration=server_config, original_destination_connection_id=self.client.original_destination_connection_id
        )
        self.client.connect(ADDR, now=self.now)
        for _ in range(10):  # the handshake, to its end (HANDSHAKE_DONE and its ACK included)
            self.deliver(self.client, self.server)
            self.deliver(self.server, self.client)
            self.now += 0.01
            self.fire_timers()
        assert self.client._handshake_complete and self.server._handshake_complete

    def fire_timers(self) -> None:
        for conn in (self.client, self.server):
            timer = conn.get_timer()
            if timer is not None and timer <= self.now:
                conn.handle_timer(now=self.now)

    def deliver(self, sender: QuicConnection, receiver: QuicConnection) -> list[list[str]]:
        """Send what ``sender`` has now to ``receiver``; the frame types of each datagram sent."""
        before = len(self.built.datagrams)
        for data, _ in sender.datagrams_to_send(now=self.now):
            receiver.receive_datagram(data, ADDR, now=self.now)
        return self.built.datagrams[before:]


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> BuiltDatagrams:
    return BuiltDatagrams(monkeypatch)


@pytest.fixture
def pair(tmp_path: Path, built: BuiltDatagrams) -> Pair:
    made = Pair(tmp_path / "certs", built)
    aioquic_internals.delay_acks(made.client)
    aioquic_internals.delay_acks(made.server)
    return made


def test_a_lone_packet_is_acked_only_after_the_delay_if_nothing_goes_back(pair: Pair) -> None:
    pair.client.send_stream_data(0, b"a record")
    assert pair.deliver(pair.client, pair.server) == [["STREAM"]]
    assert pair.deliver(pair.server, pair.client) == []  # aioquic alone would ack 1 ms later
    assert pair.server.get_timer() == pytest.approx(pair.now + ACK_DELAY)
    pair.now += ACK_DELAY
    pair.fire_timers()
    assert pair.deliver(pair.server, pair.client) == [["ACK"]]


def test_a_lone_packets_ack_rides_on_the_answer(pair: Pair) -> None:
    pair.client.send_stream_data(0, b"a record")
    pair.deliver(pair.client, pair.server)
    pair.now += 0.003  # the group commit
    pair.server.send_stream_data(1, b"its ACK")
    aioquic_internals.ack_with_data(pair.server)
    assert pair.deliver(pair.server, pair.client) == [["ACK", "STREAM"]]
    pair.now += ACK_DELAY
    pair.fire_timers()
    assert pair.deliver(pair.server, pair.client) == []  # no ACK-only packet follows


def test_a_second_packet_not_acked_yet_is_acked_at_once(pair: Pair) -> None:
    pair.client.send_stream_data(0, b"one")
    pair.deliver(pair.client, pair.server)
    pair.now += 0.001
    pair.client.send_stream_data(0, b"two")
    pair.deliver(pair.client, pair.server)
    assert pair.deliver(pair.server, pair.client) == [["ACK"]]  # a bulk sender is acked every other packet
    pair.client.send_stream_data(0, b"three")
    pair.deliver(pair.client, pair.server)
    assert pair.deliver(pair.server, pair.client) == []  # the count started again from that ACK


def test_handshake_packets_keep_aioquics_own_delay(tmp_path: Path, built: BuiltDatagrams) -> None:
    made = Pair(tmp_path / "certs", built)  # no delay_acks: as a connection is before its handshake completed
    assert made.server._ack_delay < ACK_DELAY
    aioquic_internals.delay_acks(made.server)
    assert made.server._ack_delay == ACK_DELAY
    assert made.server._spaces[tls.Epoch.ONE_RTT].ack_at is None
