"""Shared fixtures: fresh TLS certificates per test, QUIC client backends, a connected pair."""

from __future__ import annotations

import asyncio
import importlib.util
import sys

import pytest

import aqueduct
from aqueduct.runtime.certs import CertPaths, generate_certs


@pytest.fixture
def certs(tmp_path) -> CertPaths:
    """A new CA plus server (localhost, 127.0.0.1) and client certificates in tmp_path."""
    return generate_certs(tmp_path / "certs")


def picoquic_missing() -> str | None:
    """Why the picoquic backend cannot be tested here, or None."""
    if importlib.util.find_spec("aiopquic") is None:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return f"aiopquic is not installed (it needs Python >= 3.12; this is {version}): picoquic not tested"
    return None


@pytest.fixture(params=["aioquic", "picoquic"])
def client_backend(request) -> str:
    """Each QUIC client backend in turn (the server is aioquic: picoquic does not serve)."""
    if request.param == "picoquic" and (why := picoquic_missing()):
        pytest.skip(why)
    return request.param


@pytest.fixture
async def linked(certs, client_backend):
    """A server on 127.0.0.1 (free port) and one client: (client entrypoint Sender, ServerConnection)."""
    server = await aqueduct.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key)
    tx = await aqueduct.connect(
        "127.0.0.1", server.port, cafile=certs.ca, timeout=20, backend=client_backend
    )
    conn = await asyncio.wait_for(server.accept(), 20)
    yield tx, conn
    await tx.connection.close()
    await server.close()
