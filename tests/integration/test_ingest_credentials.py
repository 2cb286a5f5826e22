"""Who may write what, tried as an attacker on the same network would (issue 38).

A real ingest behind real listeners (TCP, TLS over TCP, QUIC) with a
token key, an ACL and a revocation file on disk. An honest producer
writes throughout; attackers come with no token, an expired, revoked,
foreign-signed or tampered one, another identity's stream, a stream or
a program outside their grant. Each gets its exact ERROR, is counted by
reason, and the honest producer's session and acked records are intact.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from aqueduct.auth import decode_token, issue_token, key_id, looks_like_token
from aqueduct.auth.keys import public_key_pem
from aqueduct.bridge.ingest.producer_auth import ProducerAuth
from aqueduct.bridge.ingest.service import Ingest
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.errors import ConnectorRefused
from aqueduct.connector.producer.client import Connector
from aqueduct.connector.tls import server_context
from aqueduct.connector.wallaroo import frames as v3
from aqueduct.connector.wallaroo.worker_session import WallarooSession
from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig
from aqueduct.runtime.certs import CertPaths
from tests.ingest_stop import stop_ingest
from tests.stored import stored
from tests.waiting import wait_until

TIMEOUT = 30.0  # only turns a hang into a failure
KEY = Ed25519PrivateKey.generate()
ATTACKER_KEY = Ed25519PrivateKey.generate()
eventually = functools.partial(wait_until, timeout=TIMEOUT)


def token(subject: str, *, key: Ed25519PrivateKey = KEY, age: int = 0, lifetime: int = 3600, **claims) -> str:
    claims.setdefault("streams", (f"{subject}-*",))
    return issue_token(key, subject=subject, now=int(time.time()) - age, lifetime=lifetime, **claims)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def tampered(original: str, **changes: object) -> str:
    """``original`` with claims changed and its signature kept (what a holder widening its grant sends)."""
    prefix, payload, signature = original.split(".")
    doc = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    doc.update(changes)
    return f"{prefix}.{_b64(json.dumps(doc, sort_keys=True, separators=(',', ':')).encode())}.{signature}"


def forged(subject: str) -> str:
    """A token naming the bridge's key id but signed with the attacker's own key."""
    honest = token(subject, key=ATTACKER_KEY)
    prefix, payload, _ = tampered(honest, kid=key_id(KEY.public_key())).split(".")
    head = f"{prefix}.{payload}"
    return f"{head}.{_b64(ATTACKER_KEY.sign(head.encode()))}"


def _credential(credential: str | bytes) -> dict[str, str | bytes]:
    """``Connector`` keywords sending ``credential``: as a token if it is one, else as the cookie."""
    return {"token": credential} if looks_like_token(credential) else {"cookie": credential}


@dataclass
class Bridge:
    log: DurableLog
    ingest: Ingest
    url: str
    revoked: Path
    cafile: str | None

    def connector(self, credential: str | bytes, program: str, instance: str = "p0", **options: object) -> Connector:
        """A producer of this bridge; ``options`` go to ``Connector`` (``quic_backend``, ``on_delivery`` ...)."""
        return Connector(
            self.url, program=program, instance=instance, cafile=self.cafile, **_credential(credential), **options  # type: ignore[arg-type]
        )

    def commit_all(self) -> None:
        """What the commit listener does once Spark committed every complete epoch."""
        self.ingest.on_committed({s: self.log.complete_offset(s) for s in self.log.stream_ids()})


@contextlib.asynccontextmanager
async def guarded_bridge(
    tmp_path: Path, transport: str, certs: CertPaths | None = None, backend: str = "aioquic"
) -> AsyncIterator[Bridge]:
    """An ingest whose listener admits by tokens under KEY (and revocations re-read from a file).

    ``backend``: the QUIC stack of the ``quic`` listener (a picoquic one listens on every interface).
    """
    (tmp_path / "token.pub").write_bytes(public_key_pem(KEY.public_key()))
    revoked = tmp_path / "revoked"
    revoked.write_text("")
    auth = ProducerAuth(tmp_path / "token.pub", None, revoked)
    config = WorkerConfig(cookie=b"the old shared cookie", credentials=auth.check, initial_credits=64)
    log = DurableLog(tmp_path / "log")
    ingest = Ingest(log)
    commits = asyncio.create_task(ingest.run())
    if transport == "quic":
        assert certs is not None
        host = "::" if backend == "picoquic" else "127.0.0.1"
        server = await serve_aqueduct(
            host, 0, ingest, config, certfile=certs.server_cert, keyfile=certs.server_key, backend=backend
        )
        url, cafile = f"aqueduct://127.0.0.1:{server.port}", str(certs.ca)
    elif transport == "tls":
        assert certs is not None
        tls = server_context(certs.server_cert, certs.server_key)
        server = await serve_tcp("127.0.0.1", 0, ingest, config, tls=tls)
        url, cafile = f"tcps://127.0.0.1:{server.port}", str(certs.ca)
    else:
        server = await serve_tcp("127.0.0.1", 0, ingest, config)
        url, cafile = f"tcp://127.0.0.1:{server.port}", None
    bridge = Bridge(log, ingest, url, revoked, cafile)
    committer = asyncio.create_task(_keep_committing(bridge))
    try:
        yield bridge
    finally:
        committer.cancel()
        await stop_ingest(server, commits, log)


async def _keep_committing(bridge: Bridge) -> None:
    while True:  # a Spark query keeping up
        await asyncio.sleep(0.05)
        bridge.commit_all()


async def refused(bridge: Bridge, credential: str | bytes, program: str, stream: tuple[int, str]) -> str:
    """The ERROR a producer with ``credential`` gets, at HELLO or at its NOTIFY of ``stream``."""
    with pytest.raises(ConnectorRefused) as raised:
        async with bridge.connector(credential, program) as conn:
            s = await conn.stream(*stream)
            await s.send(b"must never be stored")
            await conn.wait_all_acked(TIMEOUT)
    return raised.value.reason


@pytest.mark.parametrize("transport", ["tcp", "tls", "quic"])
async def test_every_attack_gets_its_exact_refusal_and_the_honest_producer_is_untouched(
    tmp_path: Path, certs: CertPaths, transport: str
) -> None:
    async with guarded_bridge(tmp_path, transport, certs) as bridge:
        honest = bridge.connector(token("billing"), "billing")
        async with honest:
            mine = await honest.stream(7, "billing-1")
            for i in range(50):
                await mine.send(b"b%d" % i)
            await honest.wait_all_acked(TIMEOUT)

            expired = token("billing", age=7200, lifetime=60)
            revoked = token("billing")
            os.replace(_written(tmp_path / "r.new", f"token {decode_token(revoked).token_id}\n"), bridge.revoked)
            wide = token("orders", streams=("orders-*",))
            attacks = {
                "no token": (b"the old shared cookie", "billing", (8, "billing-2")),
                "expired": (expired, "billing", (8, "billing-2")),
                "revoked": (revoked, "billing", (8, "billing-2")),
                "another key": (token("billing", key=ATTACKER_KEY), "billing", (8, "billing-2")),
                "forged": (forged("billing"), "billing", (8, "billing-2")),
                "tampered": (tampered(wide, streams=["*"]), "orders", (7, "billing-1")),
                "impersonation": (wide, "billing", (7, "billing-1")),
                "outside its streams": (wide, "orders", (9, "billing-9")),
            }
            reasons = {name: await refused(bridge, *attack) for name, attack in attacks.items()}
            for i in range(50, 100):  # the honest session never noticed
                await mine.send(b"b%d" % i)
            await honest.wait_all_acked(TIMEOUT)
            assert mine.acked == 100
        expired_id, revoked_id, wide_id = (decode_token(t).token_id for t in (expired, revoked, wide))
        assert reasons.pop("expired").startswith(f"expired: token {expired_id} of 'billing' expired ")
        assert reasons == {
            "no token": "credential_required: this bridge admits producers by a token, not by the cookie",
            "revoked": f"revoked: token {revoked_id} of 'billing': token id revoked",
            "another key": f"unknown_key: signed by key {key_id(ATTACKER_KEY.public_key())}, which this bridge does not hold",
            "forged": f"bad_signature: the signature does not verify under key {key_id(KEY.public_key())}",
            "tampered": f"bad_signature: the signature does not verify under key {key_id(KEY.public_key())}",
            "impersonation": f"program_not_allowed: program 'billing/p0' is not in programs orders/* of token {wide_id} (subject 'orders')",
            "outside its streams": f"stream_not_allowed: stream 'billing-9' (id 9) is not in streams orders-* of token {wide_id} (subject 'orders')",
        }  # fmt: skip
        refusals = bridge.ingest.counters.refusals
        assert {k: refusals[k] for k in ("credential_required", "expired", "revoked", "unknown_key",
                                         "bad_signature", "program_not_allowed", "stream_not_allowed")} == {
            "credential_required": 1, "expired": 1, "revoked": 1, "unknown_key": 1,
            "bad_signature": 2, "program_not_allowed": 1, "stream_not_allowed": 1,
        }  # fmt: skip
        assert stored(bridge.log, 7) == [(i, b"b%d" % i) for i in range(100)]
        assert set(bridge.log.stream_ids()) == {7}  # nothing an attacker sent was stored
        assert bridge.log.owner_of(7) == "billing"


def _written(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


async def test_another_identity_under_a_shared_grant_cannot_write_a_stream_it_did_not_create(tmp_path: Path) -> None:
    """Two hosts granted the same program and streams: each may create streams, not write the other's."""
    async with guarded_bridge(tmp_path, "tcp") as bridge:
        fleet = {"programs": ("fleet/*",), "streams": ("fleet-*",)}
        async with bridge.connector(token("host-a", **fleet), "fleet", "shared") as a:
            s = await a.stream(3, "fleet-a")
            await s.send(b"a0")
            await a.wait_all_acked(TIMEOUT)
        reason = await refused(bridge, token("host-b", **fleet), "fleet", (3, "fleet-a"))
        assert reason == "stream 3 belongs to identity 'host-a', not 'host-b'"
        assert bridge.ingest.counters.refusals["stream_owner"] == 1
        assert stored(bridge.log, 3) == [(0, b"a0")]


async def test_a_wallaroo_v3_connector_is_refused_the_stream_outside_its_grant_and_goes_on(tmp_path: Path) -> None:
    """v3 answers each NOTIFY (NOTIFY_ACK): the refused stream alone, the connection keeps its others."""
    (tmp_path / "token.pub").write_bytes(public_key_pem(KEY.public_key()))
    config = WorkerConfig(credentials=ProducerAuth(tmp_path / "token.pub").check)
    log = DurableLog(tmp_path / "log")
    ingest = Ingest(log)
    commits = asyncio.create_task(ingest.run())
    server = await serve_tcp("127.0.0.1", 0, ingest, config, WallarooSession)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(
            v3.encode(v3.WallarooHello("0.0.1", token("orders").encode(), "orders", "p0"))
            + v3.encode(v3.WallarooNotify(1, "orders-1", v3.NO_POINT))
            + v3.encode(v3.WallarooNotify(2, "billing-1", v3.NO_POINT))
            + v3.encode(v3.WallarooMessage(1, 0, payload=b"kept"))
        )
        splitter, frames = v3.WallarooFrameSplitter(), []
        while sum(isinstance(f, v3.NotifyAck) for f in frames) < 2:
            chunk = await asyncio.wait_for(reader.read(65536), TIMEOUT)
            assert chunk, f"the bridge closed after {frames}"
            frames += splitter.feed(chunk)
        acks = {f.stream_id: f.success for f in frames if isinstance(f, v3.NotifyAck)}
        assert acks == {1: True, 2: False}
        await eventually(lambda: 1 in log.stream_ids() and log.durable_end(1) == 1, "the allowed stream's record")
        assert ingest.counters.sessions == 1 and ingest.counters.refusals["stream_not_allowed"] == 1
        assert 2 not in log.stream_ids()
    finally:
        writer.close()
        await stop_ingest(server, commits, log)
