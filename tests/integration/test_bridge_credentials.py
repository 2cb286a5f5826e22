"""A real bridge admitting by tokens and client certificates over TLS TCP, as ``serve`` runs it (issue 38).

The bridge's listeners, ingest, log and /metrics, without Spark; the
credential files on disk, changed while it serves; producers are
connector clients over ``tcps://`` with and without client certificates.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from prometheus_client.parser import text_string_to_metric_families

from aqueduct.auth import ANONYMOUS, CLOCK_SKEW, Denied, Identity, decode_token, issue_token
from aqueduct.auth.keys import public_key_pem
from aqueduct.bridge.app.service import Bridge, BridgeConfig
from aqueduct.bridge.ingest.producer_auth import ProducerAuth
from aqueduct.connector.errors import ConnectorRefused, TlsRefused
from aqueduct.connector.producer.client import Connector
from aqueduct.runtime.certs import CertPaths
from tests.ingest_only_bridge import bridge_without_spark

TIMEOUT = 30.0  # only turns a hang into a failure
KEY = Ed25519PrivateKey.generate()
CLIENT = "CN=aqueduct-client,O=aqueduct local"  # the subject of the client certificate `aqueduct certs` makes


def rewrite(path: Path, text: str) -> None:
    """Replace ``path`` as an operator should: a finished copy renamed over it."""
    new = path.with_suffix(".new")
    new.write_text(text)
    os.replace(new, path)


def token(subject: str, streams: str) -> str:
    return issue_token(KEY, subject=subject, streams=(streams,), now=int(time.time()), lifetime=600)


@pytest.fixture
async def bridge(tmp_path: Path, certs: CertPaths) -> AsyncIterator[Bridge]:
    (tmp_path / "token.pub").write_bytes(public_key_pem(KEY.public_key()))
    (tmp_path / "acl").write_text(f'allow "{CLIENT}" programs=billing/* streams=billing-*\n')
    (tmp_path / "revoked").write_text("")
    config = BridgeConfig(
        log_dir=tmp_path / "log", tcp=("127.0.0.1", 0), tcp_tls=True, certfile=certs.server_cert,
        keyfile=certs.server_key, client_cafile=certs.ca, token_key=tmp_path / "token.pub",
        acl=tmp_path / "acl", token_revoked=tmp_path / "revoked", metrics=("127.0.0.1", 0),
    )  # fmt: skip
    async with bridge_without_spark(config) as b:
        yield b


def url(b: Bridge) -> str:
    assert b.tcp_address is not None
    return f"tcps://127.0.0.1:{b.tcp_address[1]}"


async def refusals(b: Bridge) -> dict[str, float]:
    assert b.metrics is not None
    host, port = b.metrics.address

    def get() -> str:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=TIMEOUT) as response:
            return response.read().decode()

    text = await asyncio.to_thread(get)
    return {
        s.labels["reason"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "aqueduct_refusals_total"
    }


async def written(b: Bridge, conn: Connector, stream_id: int, name: str) -> None:
    """Send one record on ``stream_id``, see it durable in the bridge's log, commit it as Spark would: acked."""
    stream = await conn.stream(stream_id, name)
    await stream.send(b"x")
    for _ in range(int(TIMEOUT / 0.02)):  # bounded: the record reaches the log
        if b.log is not None and stream_id in b.log.stream_ids() and b.log.durable_end(stream_id) == 1:
            break
        await asyncio.sleep(0.02)
    assert b.ingest is not None
    b.ingest.on_committed({stream_id: 1})
    await conn.wait_all_acked(TIMEOUT)


async def refused(conn: Connector, stream_id: int, name: str) -> str:
    """The ERROR ``conn`` gets for opening stream ``stream_id`` and sending on it."""
    with pytest.raises(ConnectorRefused) as raised:
        async with conn:
            await (await conn.stream(stream_id, name)).send(b"x")
            await conn.wait_all_acked(TIMEOUT)
    return raised.value.reason


async def test_certificates_map_through_the_acl_in_force_and_tokens_carry_their_own_grant(
    bridge: Bridge, certs: CertPaths, tmp_path: Path
) -> None:
    tls = {"cafile": str(certs.ca), "certfile": str(certs.client_cert), "keyfile": str(certs.client_key)}
    async with Connector(url(bridge), program="billing", instance="p0", **tls) as conn:
        await written(bridge, conn, 1, "billing-1")
    assert bridge.log is not None and bridge.log.owner_of(1) == CLIENT

    rewrite(tmp_path / "acl", f'allow "{CLIENT}" programs=billing/* streams=audit-*\n')  # no restart
    assert await refused(Connector(url(bridge), program="billing", instance="p0", **tls), 2, "billing-2") == (
        f"stream_not_allowed: stream 'billing-2' (id 2) is not in streams audit-* of {tmp_path / 'acl'}:1"
    )

    async with Connector(url(bridge), program="orders", instance="p0", token=token("orders", "orders-*"), **tls) as conn:
        await written(bridge, conn, 3, "orders-1")  # a token beside the certificate: the token's grant
    rewrite(tmp_path / "revoked", f'subject "{CLIENT}"\n')
    with pytest.raises(ConnectorRefused, match=rf"^revoked: certificate subject '{CLIENT}': subject revoked$"):
        await Connector(url(bridge), program="billing", instance="p0", connect_timeout=TIMEOUT, **tls).connect()
    counted = await refusals(bridge)
    assert (counted["stream_not_allowed"], counted["revoked"]) == (1, 1)


async def test_without_a_client_certificate_even_a_valid_token_is_refused_at_hello(
    bridge: Bridge, certs: CertPaths
) -> None:
    producer = Connector(url(bridge), token=token("orders", "orders-*"), cafile=str(certs.ca), connect_timeout=TIMEOUT)
    with pytest.raises(ConnectorRefused, match="^credential_required: this listener admits only producers "
                                               "presenting a client certificate$"):  # fmt: skip
        await producer.connect()
    assert (await refusals(bridge))["credential_required"] == 1


async def test_tls_tcp_without_client_certificates_admits_by_token(tmp_path: Path, certs: CertPaths) -> None:
    (tmp_path / "token.pub").write_bytes(public_key_pem(KEY.public_key()))
    config = BridgeConfig(
        log_dir=tmp_path / "log", tcp=("127.0.0.1", 0), tcp_tls=True, certfile=certs.server_cert,
        keyfile=certs.server_key, token_key=tmp_path / "token.pub",
    )  # fmt: skip
    b = Bridge(config)
    await b.start(run_query=False)
    try:
        async with Connector(url(b), program="orders", instance="p0", token=token("orders", "orders-*"),
                             cafile=str(certs.ca)) as conn:  # fmt: skip
            await written(b, conn, 5, "orders-5")
        with pytest.raises(TlsRefused):  # a producer verifying the bridge with another CA never sends its token
            await Connector(url(b), token=token("orders", "orders-*"), connect_timeout=TIMEOUT).connect()
    finally:
        await b.stop()


async def test_a_plaintext_listener_beyond_loopback_is_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="aqueduct")
    b = Bridge(BridgeConfig(log_dir=tmp_path / "log", tcp=("0.0.0.0", 0), wallaroo_tcp=("127.0.0.1", 0)))
    await b.start(run_query=False)
    try:
        assert b.tcp_address is not None
        warnings = [r.getMessage() for r in caplog.records if r.name == "aqueduct.bridge.app.listeners"]
        assert warnings == [
            f"the TCP listener on 0.0.0.0:{b.tcp_address[1]} is plaintext: credentials and records cross "
            "the network in clear (add --tcp-tls)"
        ]  # the Wallaroo listener on loopback: no warning
    finally:
        await b.stop()


async def test_a_token_revoked_while_its_producer_is_connected_ends_that_session_only(
    bridge: Bridge, certs: CertPaths, tmp_path: Path
) -> None:
    tls = {"cafile": str(certs.ca), "certfile": str(certs.client_cert), "keyfile": str(certs.client_key)}
    revoked = token("orders", "orders-*")
    async with Connector(url(bridge), program="billing", instance="p0", **tls) as other:
        await written(bridge, other, 1, "billing-1")
        victim = Connector(url(bridge), program="orders", instance="p0", token=revoked, **tls)
        try:
            await victim.connect()
            await written(bridge, victim, 3, "orders-1")
            rewrite(tmp_path / "revoked", f"token {decode_token(revoked).token_id}\n")  # no restart
            stream = await victim.stream(4, "orders-2")
            with pytest.raises(ConnectorRefused, match=r"^revoked: token:orders: token id revoked while connected$"):
                await stream.send(b"after the revocation")
                await victim.wait_all_acked(TIMEOUT)
        finally:
            await victim.close()
        await written(bridge, other, 2, "billing-2")  # the other session never noticed
    assert (await refusals(bridge))["revoked"] == 1


def test_a_session_check_refuses_tokens_expired_or_revoked_since_hello(tmp_path: Path) -> None:
    (tmp_path / "token.pub").write_bytes(public_key_pem(KEY.public_key()))
    (tmp_path / "revoked").write_text("subject gone\n")
    auth = ProducerAuth(tmp_path / "token.pub", None, tmp_path / "revoked")
    identity = auth.check(token("orders", "orders-*").encode(), None)
    assert isinstance(identity, Identity) and identity.expires_at is not None
    check = auth.sessions_check(identity.expires_at - 1)
    assert check(identity) is None and check(ANONYMOUS) is None
    assert str(auth.sessions_check(identity.expires_at + CLOCK_SKEW)(identity)).startswith("expired: token ")
    gone = auth.check(token("gone", "gone-*").encode(), None)
    assert isinstance(gone, Denied)  # revoked at HELLO already


async def test_a_quic_client_certificate_maps_through_the_acl_too(tmp_path: Path, certs: CertPaths) -> None:
    (tmp_path / "acl").write_text(f'allow "{CLIENT}" programs=billing/* streams=billing-*\n')
    config = BridgeConfig(
        log_dir=tmp_path / "log", quic=("127.0.0.1", 0), certfile=certs.server_cert, keyfile=certs.server_key,
        client_cafile=certs.ca, acl=tmp_path / "acl",
    )  # fmt: skip
    b = Bridge(config)
    await b.start(run_query=False)
    try:
        assert b.quic_address is not None
        quic = f"aqueduct://127.0.0.1:{b.quic_address[1]}"
        tls = {"cafile": str(certs.ca), "certfile": str(certs.client_cert), "keyfile": str(certs.client_key)}
        async with Connector(quic, program="billing", instance="p0", **tls) as conn:
            await written(b, conn, 1, "billing-1")
        assert b.log is not None and b.log.owner_of(1) == CLIENT
        assert await refused(Connector(quic, program="billing", instance="p0", **tls), 2, "orders-2") == (
            f"stream_not_allowed: stream 'orders-2' (id 2) is not in streams billing-* of {tmp_path / 'acl'}:1"
        )
    finally:
        await b.stop()
