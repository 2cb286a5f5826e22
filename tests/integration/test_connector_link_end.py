"""A producer's Aqueduct link whose connection ends while a receive is being cancelled.

At a bridge restart thousands of producers learn at once that their
connection is gone (a stateless reset), and each cancels what it was
waiting on. A receive cancelled just after its connection ended left the
end's exception unread, and asyncio printed "Task exception was never
retrieved" with a traceback for each: noise on every restart.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import aqueduct
from aqueduct.connector.frames import Hello, encode
from aqueduct.connector.outbound import Mode
from aqueduct.connector.producer.aqueduct_link import AqueductLink

TIMEOUT = 30.0  # only turns a hang into a failure


async def test_a_receive_cancelled_as_its_connection_ends_leaves_nothing_unread(certs) -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        async with await aqueduct.serve(
            "127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key
        ) as server:
            link = await AqueductLink.open("127.0.0.1", server.port, lambda _sid: Mode.ORDERED, cafile=str(certs.ca))
            hello = Hello("0.1", b"", "program", "instance")
            await link.send([(hello, encode(hello))])  # the control channel the session's answers come on
            conn = await asyncio.wait_for(server.accept(), TIMEOUT)
            await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT)  # the server has the HELLO and its channel
            await conn.close()
            await asyncio.wait_for(link._entry.connection.wait_closed(), TIMEOUT)
            receiving = asyncio.ensure_future(link.receive())
            await asyncio.sleep(0)  # receive() started its receiving task and waits on it
            await asyncio.sleep(0)  # that task ran: it failed with the connection's end
            receiving.cancel()  # the session is being torn down at that moment
            cancelled = False
            try:  # not pytest.raises: its record of the exception would keep the failed task alive
                await receiving
            except asyncio.CancelledError:
                cancelled = True
            assert cancelled
            del receiving
            await asyncio.sleep(0)  # the loop lets go of the tasks that ended
            gc.collect()  # an unread exception is reported when its task is collected
    finally:
        loop.set_exception_handler(None)
    assert [c["message"] for c in reported] == []
