"""A server SIGKILLed and restarted on its port and key resets its predecessor's connections: clients need not wait for their idle timeout.

The server is a real process (``aqueduct.serve`` on aioquic), killed without
a CONNECTION_CLOSE; its successor knows nothing of the old connections, but
derives the same reset tokens from the same private key
(:mod:`aqueduct.runtime.backends.stateless_reset`). The client's next packet
is answered with a stateless reset and its connection ends saying so. No
timing is asserted: the idle timeout is left at its default (60 s), far
beyond the hang guard, and the close reason names the cause.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import pytest

import aqueduct
from aqueduct.proto.errors import ConnectionLost
from aqueduct.runtime.backends.stateless_reset import STATELESS_RESET
from aqueduct.runtime.certs import CertPaths, generate_certs

TIMEOUT = 30.0  # only turns a hang into a failure; below the 60 s idle timeout, so only a reset ends the wait

SERVER_SCRIPT = """
import asyncio, sys
import aqueduct

async def main():
    server = await aqueduct.serve("127.0.0.1", int(sys.argv[3]), certfile=sys.argv[1], keyfile=sys.argv[2])
    print(server.port, flush=True)
    async for conn in server:
        pass

asyncio.run(main())
"""


class ServerProcess:
    """``aqueduct.serve`` in a process of its own, SIGKILLed and restarted on the same port."""

    def __init__(self, certs: CertPaths) -> None:
        self.certs = certs
        self.port = 0
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, certs: CertPaths | None = None) -> None:
        certs = certs or self.certs
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SERVER_SCRIPT, str(certs.server_cert), str(certs.server_key), str(self.port),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.port = int(await asyncio.wait_for(self.proc.stdout.readline(), TIMEOUT))

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()  # no CONNECTION_CLOSE: the connections die with the process
        await self.proc.wait()


@pytest.fixture
async def server(certs: CertPaths) -> AsyncIterator[ServerProcess]:
    process = ServerProcess(certs)
    await process.start()
    yield process
    if process.proc is not None and process.proc.returncode is None:
        await process.kill()


async def lost_after_restart(server: ServerProcess, certs: CertPaths, backend: str) -> ConnectionLost:
    """Connect, kill and restart the server, send: how the connection ended."""
    tx = await aqueduct.connect("127.0.0.1", server.port, cafile=certs.ca, timeout=TIMEOUT, backend=backend)
    await tx.send("before")
    await server.kill()
    await server.start()
    await tx.send("after the restart")  # its packet reaches the new process, which knows no such connection
    await asyncio.wait_for(tx.connection.wait_closed(), TIMEOUT)
    lost = tx.connection.close_reason
    assert isinstance(lost, ConnectionLost)
    return lost


async def test_a_restarted_server_resets_the_connections_of_the_killed_one(
    server: ServerProcess, certs: CertPaths, client_backend: str
) -> None:
    lost = await lost_after_restart(server, certs, client_backend)
    assert STATELESS_RESET in str(lost)


async def test_a_server_restarted_with_another_key_cannot_reset_them(server: ServerProcess, certs: CertPaths, tmp_path) -> None:
    """The contrast: tokens follow the key, so a new key leaves the old clients to their idle timeout."""
    other = generate_certs(tmp_path / "other")
    tx = await aqueduct.connect("127.0.0.1", server.port, cafile=certs.ca, timeout=TIMEOUT, idle_timeout=2.0)
    await server.kill()
    await server.start(other)
    await tx.send("after the restart")
    await asyncio.wait_for(tx.connection.wait_closed(), TIMEOUT)
    assert STATELESS_RESET not in str(tx.connection.close_reason)
