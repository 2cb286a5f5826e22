"""Our paths: the same traffic through Aqueduct's public API (``aqueduct.serve/connect``).

The client sends raw ``bytes`` on its entrypoint Sender (raw bytes pass the
payload codec unchanged), in the mode the role names; the server iterates
its entrypoint Receiver, as an application would. ``params["backend"]``
picks the QUIC stack of both ends (picoquic: under ``interop.netns``);
``params["batch"]`` = N hands messages over N at a time (``send_many``)
and reads them in bulk (``recv_many``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aqueduct
from aqueduct.proto.errors import AqueductError
from bench.common import SERVER_NAME, Certs, Meter, listen_host, payload, run_until_idle, send_for


async def _serve(params: dict[str, Any], certs: Certs, ready: Callable[[int], None]) -> dict[str, Any]:
    meter = Meter(params["warmup"])
    backend = params.get("backend", "aioquic")
    options = {"window": params["window"]} if "window" in params else {}
    server = await aqueduct.serve(
        listen_host(backend), 0, certfile=certs.server_cert, keyfile=certs.server_key, backend=backend, **options
    )
    ready(server.port)

    async def receive() -> None:
        conn = await server.accept()
        add = meter.add
        if params.get("batch"):  # the batch API on this side too: Receiver.recv_many
            rx = conn.entrypoint
            while True:
                try:
                    values = await rx.recv_many()
                except aqueduct.Finished:
                    return
                add(len(values), sum(map(len, values)))
        async for value in conn.entrypoint:
            add(1, len(value))

    try:
        ended = await run_until_idle(receive(), meter, params["idle"], params["limit"])
    finally:
        await server.close()
    return {**meter.result(), "ended": ended}


async def _send(params: dict[str, Any], certs: Certs, port: int, mode: str) -> dict[str, Any]:
    tx = await aqueduct.connect(
        "127.0.0.1", port, cafile=certs.ca, server_name=SERVER_NAME, timeout=20,
        backend=params.get("backend", "aioquic"),
    )  # fmt: skip
    if mode == "unordered":
        tx.unordered()
    elif mode == "unreliable":
        tx.unreliable()
    body = payload(params["size"])
    send = tx.send
    batch = params.get("batch", 0)
    try:
        if batch:  # Sender.send_many: one call per `batch` messages
            many, bodies = tx.send_many, [body] * batch
            sent = batch * await send_for(params["seconds"], lambda: many(bodies), params.get("yield_every", 0))
        else:
            sent = await send_for(params["seconds"], lambda: send(body), params.get("yield_every", 0))
        stats = tx.stats()
        packets = tx.connection.stats()["quic"]["packets_sent"]
        await tx.finish()
    except AqueductError as exc:  # e.g. the server gave up waiting: its result still counts
        return {"error": f"{type(exc).__name__}: {exc}"}
    try:  # the server closes once it has everything
        await asyncio.wait_for(tx.connection.wait_closed(), params["limit"])
    except TimeoutError:
        await tx.connection.close()
    # Messages that waited for the send window, and unreliable ones evicted from
    # a full queue: both cost sender CPU without (or before) arriving. Packets:
    # fewer per message means less of QUIC's per-packet work on both sides.
    return {
        "sent": sent,
        "packets": packets,
        "window_stalls": stats.get("window_stalls"),
        "evicted": stats.get("evicted"),
    }


serve_ordered = serve_unordered = serve_unreliable = _serve


async def send_ordered(params: dict[str, Any], certs: Certs, port: int) -> dict[str, Any]:
    return await _send(params, certs, port, "ordered")


async def send_unordered(params: dict[str, Any], certs: Certs, port: int) -> dict[str, Any]:
    return await _send(params, certs, port, "unordered")


async def send_unreliable(params: dict[str, Any], certs: Certs, port: int) -> dict[str, Any]:
    return await _send(params, certs, port, "unreliable")
