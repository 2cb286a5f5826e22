"""Shared fixtures: fresh TLS certificates per test, and a connected client/server pair."""

from __future__ import annotations

import asyncio

import pytest

import aqueduct
from aqueduct.runtime.certs import CertPaths, generate_certs


@pytest.fixture
def certs(tmp_path) -> CertPaths:
    """A new CA plus server (localhost, 127.0.0.1) and client certificates in tmp_path."""
    return generate_certs(tmp_path / "certs")


@pytest.fixture
async def linked(certs):
    """A server on 127.0.0.1 (free port) and one client: (client entrypoint Sender, ServerConnection)."""
    server = await aqueduct.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key)
    tx = await aqueduct.connect("127.0.0.1", server.port, cafile=certs.ca, timeout=20)
    conn = await asyncio.wait_for(server.accept(), 20)
    yield tx, conn
    await tx.connection.close()
    await server.close()
