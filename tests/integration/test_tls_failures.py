"""A failed TLS handshake says whose certificate failed, which one and why, on both QUIC backends.

Real certificates, real QUIC over loopback. The client names the server's
certificate it refused (untrusted, expired, made for another host) or says
the server refused its own; a producer gives up at once on either, also on
picoquic, whose own refusal reaches the client as a bare close. The server
counts and logs every failed handshake with the client's address, and says
whether it refused the client's certificate or the client refused its own.
A picoquic server runs only in a loopback-only network namespace
(``tests/conftest.py``).
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import logging
import re
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import aqueduct
from aqueduct import CertificateRefused
from aqueduct.connector.errors import TlsRefused
from aqueduct.connector.producer.client import Connector
from aqueduct.runtime.certs import CertPaths, cert_paths, generate_certs
from tests.waiting import wait_until

TIMEOUT = 20.0  # only turns a hang into a failure
SERVER = "CN=localhost,O=aqueduct local"
CLIENT = "CN=aqueduct-client,O=aqueduct local"
SERVER_LOG = "aqueduct.runtime.backends.quic_server"


def expired_certs(directory: Path) -> tuple[CertPaths, datetime.datetime]:
    """A valid CA with server and client certificates that expired a day ago (as ``generate_certs`` lays them out)."""
    paths = cert_paths(directory)
    directory.mkdir(parents=True)
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    expired = now - datetime.timedelta(days=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "expired test CA")])

    def signed(name: x509.Name, key: ec.EllipticCurvePrivateKey, until: datetime.datetime) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder().subject_name(name).issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=10))
            .not_valid_after(until)
        )  # fmt: skip

    ca = signed(ca_name, ca_key, now + datetime.timedelta(days=1)).add_extension(
        x509.BasicConstraints(ca=True, path_length=0), critical=True
    )
    paths.ca.write_bytes(ca.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    paths.client_ca.write_bytes(paths.ca.read_bytes())
    leaves = (
        (paths.server_cert, paths.server_key, "localhost", ExtendedKeyUsageOID.SERVER_AUTH,
         [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
        (paths.client_cert, paths.client_key, "aqueduct-client", ExtendedKeyUsageOID.CLIENT_AUTH,
         [x509.DNSName("aqueduct-client")]),
    )  # fmt: skip
    for cert_path, key_path, cn, usage, san in leaves:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "aqueduct local"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])  # fmt: skip
        cert = (
            signed(name, key, expired).add_extension(x509.SubjectAlternativeName(san), critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False).sign(ca_key, hashes.SHA256())
        )  # fmt: skip
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )
    return paths, expired


async def refused(server_certs: CertPaths, backend: str, host: str, port: int, **client) -> CertificateRefused:
    """What connecting raises: a :class:`CertificateRefused`, checked to be one line."""
    with pytest.raises(CertificateRefused) as caught:
        await aqueduct.connect(host, port, timeout=TIMEOUT, backend=backend, **client)
    assert "\n" not in str(caught.value)
    return caught.value


async def server_logged(caplog, server, pattern: str) -> None:
    """The server counted one failed TLS handshake and logged it, one line matching ``pattern``."""
    await wait_until(lambda: server.failed_handshakes.get("tls", 0) == 1, "the failed handshake counted", TIMEOUT)
    lines = [r.getMessage() for r in caplog.records if r.name == SERVER_LOG and r.levelno == logging.WARNING]
    assert len(lines) == 1, lines
    assert re.fullmatch(pattern, lines[0]), lines[0]


CLIENT_REFUSAL = r"(bad_certificate \(alert 42\)|unknown_ca \(alert 48\))(, .+)?"
"""How a server words a client's refusal of its certificate: picoquic's client sends only the alert, aioquic's
its reasons too (which a picoquic server does not hear)."""


# ---------------------------------------------------------------- the server's certificate, refused by the client


def untrusted(tmp_path: Path, certs: CertPaths) -> tuple[CertPaths, dict, str, str | None]:
    """A server certificate from a CA the client's cafile does not hold."""
    theirs = generate_certs(tmp_path / "theirs")
    said = (
        f"connection closed (error code 298): the server's certificate ({SERVER}) is not signed by a CA "
        f"in cafile {theirs.ca} (unable to get local issuer certificate)"
    )
    logged = r"QUIC handshake from 127\.0\.0\.1:\d+ failed: the client refused this server's certificate: " + CLIENT_REFUSAL
    return certs, {"cafile": theirs.ca}, said, logged


def expired(tmp_path: Path, certs: CertPaths) -> tuple[CertPaths, dict, str, str | None]:
    """A server certificate that expired a day ago: the client says when."""
    old, when = expired_certs(tmp_path / "old")
    said = f"connection closed (error code 301): the server's certificate ({SERVER}) expired on {when:%Y-%m-%d %H:%M:%S} UTC"
    logged = r"QUIC handshake from 127\.0\.0\.1:\d+ failed: the client refused this server's certificate: .+"
    return old, {"cafile": old.ca}, said, logged


def another_host(tmp_path: Path, certs: CertPaths) -> tuple[CertPaths, dict, str, str | None]:
    """A server certificate for localhost, asked for as bridge.example.com: both names said."""
    said = (
        f"connection closed (error code 298): the server's certificate ({SERVER}) is for localhost, "
        "127.0.0.1, not host 'bridge.example.com'"
    )
    return certs, {"cafile": certs.ca, "server_name": "bridge.example.com"}, said, None


@pytest.mark.parametrize("case", [untrusted, expired, another_host], ids=lambda case: case.__name__)
async def test_a_refused_server_certificate_is_named_on_the_client(
    tmp_path, certs, server_backend, server_host, client_backend, caplog, case
) -> None:
    """Each way a server certificate fails: whose, which and why on the client; the failure counted and logged."""
    caplog.set_level(logging.WARNING, SERVER_LOG)
    served, client, said, logged = case(tmp_path, certs)
    async with await aqueduct.serve(
        server_host, 0, certfile=served.server_cert, keyfile=served.server_key, backend=server_backend
    ) as server:
        error = await refused(served, client_backend, "127.0.0.1", server.port, **client)
        assert error.whose == "server"
        assert str(error) == said
        if logged is not None:
            await server_logged(caplog, server, logged)


async def test_a_producer_gives_up_at_once_on_the_servers_certificate(
    tmp_path, certs, server_backend, server_host, client_backend
) -> None:
    """On picoquic too: its own refusal used to come as close code 0, and the producer retried forever."""
    theirs = generate_certs(tmp_path / "theirs")
    async with await aqueduct.serve(
        server_host, 0, certfile=certs.server_cert, keyfile=certs.server_key, backend=server_backend
    ) as server:
        url = f"aqueduct://127.0.0.1:{server.port}"
        conn = Connector(url, cafile=str(theirs.ca), connect_timeout=TIMEOUT, quic_backend=client_backend)
        with pytest.raises(TlsRefused, match=rf"^TLS handshake with 127\.0\.0\.1:{server.port} failed: the "
                           rf"server's certificate \({SERVER}\) is not signed by a CA in cafile "):  # fmt: skip
            await conn.connect()
        assert conn.stats.retries == 0


# ---------------------------------------------------------------- the client's certificate, refused by the server
# (mutual TLS: an aioquic server; a picoquic client presents no certificate)


def client_of_another_ca(tmp_path: Path, certs: CertPaths) -> tuple[Path, CertPaths, int, str]:
    """A client certificate from a CA the server's client CA is not."""
    theirs = generate_certs(tmp_path / "theirs")
    return certs.client_ca, theirs, 298, "it is not signed by the client CA (unable to get local issuer certificate)"


def client_expired(tmp_path: Path, certs: CertPaths) -> tuple[Path, CertPaths, int, str]:
    """A client certificate of the server's client CA that expired a day ago: the server says when."""
    old, when = expired_certs(tmp_path / "old")
    return old.client_ca, old, 301, f"it expired on {when:%Y-%m-%d %H:%M:%S} UTC"


@pytest.mark.parametrize("case", [client_of_another_ca, client_expired], ids=lambda case: case.__name__)
async def test_a_refused_client_certificate_is_the_clients_fault(tmp_path, certs, caplog, case) -> None:
    """Each way a client certificate fails: the client hears whose, which and why; the server counts and logs it."""
    caplog.set_level(logging.WARNING, SERVER_LOG)
    client_ca, presented, code, why = case(tmp_path, certs)
    async with await aqueduct.serve(
        "127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key, cafile=client_ca
    ) as server:
        error = await refused(
            certs, "aioquic", "127.0.0.1", server.port, cafile=certs.ca,
            certfile=presented.client_cert, keyfile=presented.client_key,
        )  # fmt: skip
        assert error.whose == "client"
        assert str(error) == (
            f"connection closed (error code {code}): the server refused the client's certificate ({CLIENT}): {why}"
        )
        await server_logged(
            caplog, server, rf"QUIC handshake from 127\.0\.0\.1:\d+ failed: refused the client's certificate "
            rf"\({CLIENT}\): {re.escape(why)}",
        )  # fmt: skip


@pytest.mark.parametrize(
    ("backend", "words"),
    [
        ("aioquic", "the server refused the client: it presented no certificate (mutual TLS requires one)"),
        ("picoquic", "the server requires a client certificate (mutual TLS) and this client presented none"),
    ],
)
async def test_no_client_certificate_where_one_is_required(certs, backend, words, caplog) -> None:
    """picoquic's client gets the alert without the server's words: it says what the alert means."""
    if backend == "picoquic":
        pytest.importorskip("aiopquic")
    caplog.set_level(logging.WARNING, SERVER_LOG)
    async with await aqueduct.serve(
        "127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key, cafile=certs.client_ca
    ) as server:
        error = await refused(certs, backend, "127.0.0.1", server.port, cafile=certs.ca)
        assert error.whose == "client"
        assert str(error) == f"connection closed (error code 372): {words}"
        await server_logged(
            caplog, server, r"QUIC handshake from 127\.0\.0\.1:\d+ failed: refused the client: it presented no "
            r"certificate \(mutual TLS requires one\)",
        )  # fmt: skip


# ---------------------------------------------------------------- addresses


async def test_both_ends_know_their_peers_address(linked) -> None:
    tx, conn = linked
    client_side = tx.connection.peer_address
    server_side = conn.peer_address
    assert client_side is not None and client_side[0] == "127.0.0.1"
    assert server_side is not None and server_side[0] == "127.0.0.1"
    assert client_side[1] != server_side[1]  # the server's port, the client's


async def test_picoquic_giving_up_on_a_silent_server_is_no_certificate_failure() -> None:
    """picoquic ends both with the same bare close; only a quick one has the server's certificate checked."""
    pytest.importorskip("aiopquic")
    loop = asyncio.get_running_loop()
    senders: set[tuple[str, int]] = set()

    class Silent(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
            senders.add(addr)

    silent, _ = await loop.create_datagram_endpoint(Silent, local_addr=("127.0.0.1", 0))
    try:
        port = silent.get_extra_info("sockname")[1]
        with pytest.raises(aqueduct.ConnectionLost) as caught:
            await aqueduct.connect("127.0.0.1", port, timeout=TIMEOUT, idle_timeout=1.0, backend="picoquic")
        assert not isinstance(caught.value, CertificateRefused)
        assert len(senders) == 1  # the client alone: no second connection went to fetch a certificate
    finally:
        silent.close()
