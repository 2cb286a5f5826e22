"""Keep-alive: idle connections outlive a short idle timeout; a dead server is noticed fast.

On every client backend: aioquic's PINGs come from the driver's timer,
picoquic sends its own (``QuicTransport.pings_itself``).
"""

from __future__ import annotations

import asyncio
import sys

import aqueduct
from aqueduct.proto.errors import ConnectionLost

IDLE = 1.0  # seconds: short, so "idle for longer than the timeout" is quick to reach
TIMEOUT = 30.0  # only turns a hang into a failure

SERVER_SCRIPT = """
import asyncio, sys
import aqueduct

async def main():
    server = await aqueduct.serve("127.0.0.1", 0, certfile=sys.argv[1], keyfile=sys.argv[2])
    print(server.port, flush=True)
    async for conn in server:
        pass

asyncio.run(main())
"""


async def test_idle_connection_outlives_the_idle_timeout_with_keepalive(certs, client_backend) -> None:
    async with await aqueduct.serve(
        "127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key
    ) as server:
        tx = await aqueduct.connect(
            "127.0.0.1", server.port, cafile=certs.ca, idle_timeout=IDLE, backend=client_backend
        )
        conn = await asyncio.wait_for(server.accept(), TIMEOUT)
        try:
            await asyncio.sleep(4 * IDLE)  # no application traffic at all
            assert not tx.connection.is_closed
            await tx.send("still here")
            assert await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT) == "still here"
        finally:
            await tx.connection.close()


async def test_without_keepalive_the_idle_timeout_closes_the_connection(certs, client_backend) -> None:
    """The contrast that shows the PINGs above are what keeps the connection up."""
    async with await aqueduct.serve(
        "127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key
    ) as server:
        tx = await aqueduct.connect(
            "127.0.0.1", server.port, cafile=certs.ca, idle_timeout=IDLE, keepalive=False, backend=client_backend
        )
        await asyncio.wait_for(tx.connection.wait_closed(), TIMEOUT)
        assert isinstance(tx.connection.close_reason, ConnectionLost)


async def test_killed_server_is_noticed_within_the_idle_timeout(certs, client_backend) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SERVER_SCRIPT, str(certs.server_cert), str(certs.server_key),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        port = int(await asyncio.wait_for(proc.stdout.readline(), TIMEOUT))
        tx = await aqueduct.connect(
            "127.0.0.1", port, cafile=certs.ca, idle_timeout=IDLE, timeout=TIMEOUT, backend=client_backend
        )
        await asyncio.sleep(2 * IDLE)
        assert not tx.connection.is_closed  # healthy and idle: kept up
        proc.kill()  # no CONNECTION_CLOSE: only the silence tells
        await proc.wait()
        loop = asyncio.get_running_loop()
        killed_at = loop.time()
        await asyncio.wait_for(tx.connection.wait_closed(), TIMEOUT)
        # Noticed after about the idle timeout, far below QUIC's 60 s default.
        assert loop.time() - killed_at < 10 * IDLE
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
