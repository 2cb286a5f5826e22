"""A connection that ended leaves nothing alive: no driver, core or QUIC state per closed connection.

A server that runs for weeks sees millions of connections come and go; any
object kept per closed connection is memory that grows without bound. The
check is by weak references after garbage collection, not by timing or RSS.
"""

from __future__ import annotations

import asyncio
import gc
import weakref

import aqueduct

TIMEOUT = 30


async def test_closed_connections_leave_no_driver_alive_on_either_side(certs):
    server = await aqueduct.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key)
    drivers: list[weakref.ref] = []
    async with server:
        for i in range(5):
            tx = await aqueduct.connect("127.0.0.1", server.port, cafile=certs.ca)
            conn = await asyncio.wait_for(server.accept(), TIMEOUT)
            async with tx:  # finishes the entrypoint and closes the connection
                reply_tx, reply_rx = aqueduct.channel()  # a channel inside a message, networked
                await tx.send({"n": i, "reply": reply_tx})
                message = await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT)
                await message["reply"].send("ok")
                assert await asyncio.wait_for(reply_rx.recv(), TIMEOUT) == "ok"
            await asyncio.wait_for(conn.wait_closed(), TIMEOUT)
            drivers += [weakref.ref(tx.connection._driver), weakref.ref(conn._driver)]
            del tx, conn, message, reply_tx, reply_rx
        await asyncio.sleep(0)  # let the callbacks of the last close run
        gc.collect()
        alive = [ref() for ref in drivers if ref() is not None]
        assert alive == [], f"{len(alive)} of {len(drivers)} drivers of closed connections are still alive"
