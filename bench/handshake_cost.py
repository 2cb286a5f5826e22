"""Where a handshake's time goes: CPU per connection, the server's apart from the client's.

::

    python -m bench.handshake_cost --count 300 --json
    python -m interop.netns -- python -m bench.handshake_cost --kinds quic-picoquic producer-quic-picoquic

A server process and a client process (``--concurrency`` connections in
flight at once); the client makes ``--count`` connections after a warm-up,
and each side's CPU (``time.process_time``: every thread of the process,
picoquic's network thread included) over them is divided by the count.
The server's CPU of an idle second is reported too: a stack that spins
when idle would otherwise pass its idling off as handshake work. Kinds:

- ``tcp``: a plain TCP connection (asyncio server; one byte each way);
- ``tls``: TLS 1.3 over TCP, a plain ``ssl`` server with the bridge's
  certificate (the bridge has no TLS listener yet: this is the stand-in
  for what one would cost);
- ``quic-aioquic``, ``quic-picoquic``: an Aqueduct connection, the QUIC
  handshake and the Aqueduct one (``aqueduct.serve`` / ``connect``);
- ``producer-quic-aioquic``, ``producer-quic-picoquic``, ``producer-tcp``:
  what one producer reconnecting costs the bridge, end to end: the bridge's
  listener, ingest and durable log (``bench.fleet``'s bridge), a
  ``Connector`` that connects, opens its stream, has one record acked, and
  closes. That is a storm's unit of work.

``--profile DIR`` writes the server's cProfile of each kind there (its
whole life: warm-up included), and its top functions as text.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import pstats
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.fleet import _json_line, _say, payload

KINDS = ["tcp", "tls", "quic-aioquic", "quic-picoquic", "producer-tcp", "producer-quic-aioquic", "producer-quic-picoquic"]
WARMUP = 20
_CLOSING: set[asyncio.Future[None]] = set()  # QUIC connections still draining after close


def _backend(kind: str) -> str:
    return "picoquic" if kind.endswith("picoquic") else "aioquic"


# ---------------------------------------------------------------- server role


async def _answer_one_byte(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        writer.write(await reader.readexactly(1))
        await writer.drain()
        await reader.read()  # until the client closes
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def _listen(kind: str, certs: Any) -> tuple[int, Any]:
    """A server of ``kind`` on a free port; (port, something to close)."""
    if kind in ("tcp", "tls"):
        context = None
        if kind == "tls":
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.minimum_version = ssl.TLSVersion.TLSv1_3
            context.load_cert_chain(certs.server_cert, certs.server_key)
        server = await asyncio.start_server(_answer_one_byte, "127.0.0.1", 0, ssl=context, backlog=4096)
        return server.sockets[0].getsockname()[1], server
    import aqueduct
    from bench.common import listen_host

    backend = _backend(kind)
    aq = await aqueduct.serve(
        listen_host(backend), 0, certfile=certs.server_cert, keyfile=certs.server_key, backend=backend
    )

    async def hold(conn: Any) -> None:
        with contextlib.suppress(Exception):  # the client's close ends it
            await conn.entrypoint.recv()

    async def accept() -> None:
        async for conn in aq:
            asyncio.ensure_future(hold(conn))

    acceptor = asyncio.ensure_future(accept())
    return aq.port, (aq, acceptor)


async def server_role(args: argparse.Namespace) -> None:
    """Listen; answer ``cpu`` with this process's CPU seconds; stop at end of input."""
    from aqueduct.runtime.certs import cert_paths

    port, server = await _listen(args.kind, cert_paths(args.certs))
    print(json.dumps({"port": port, "cpu_s": time.process_time()}), flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while (await reader.readline()).strip() == b"cpu":
        print(json.dumps({"cpu_s": time.process_time()}), flush=True)
    if isinstance(server, tuple):
        server[1].cancel()
        await server[0].close()
    else:
        server.close()


# ---------------------------------------------------------------- client role


async def _one(kind: str, port: int, certs: Any, i: int) -> None:
    """One connection of ``kind`` (as producer ``i``), made and closed."""
    if kind in ("tcp", "tls"):
        context = None
        if kind == "tls":
            context = ssl.create_default_context(cafile=str(certs.ca))
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        writer.write(b"x")
        await reader.readexactly(1)
        writer.close()
        await writer.wait_closed()
    elif kind.startswith("quic"):
        import aqueduct

        tx = await aqueduct.connect("127.0.0.1", port, cafile=certs.ca, backend=_backend(kind))
        closing = asyncio.ensure_future(tx.connection.close())  # its draining wait is no work: not waited here
        _CLOSING.add(closing)
        closing.add_done_callback(_CLOSING.discard)
    else:
        from aqueduct.connector.producer.client import Connector

        scheme = "tcp" if kind == "producer-tcp" else "aqueduct"
        conn = Connector(
            f"{scheme}://127.0.0.1:{port}", program="handshake", instance=f"p{i}", cafile=str(certs.ca),
            quic_backend=_backend(kind),
        )
        await conn.connect()
        stream = await conn.stream(i, f"handshake/{i}")
        await stream.send(payload(i, stream.resume_from), message_id=stream.resume_from)
        await conn.wait_all_acked(60)
        await conn.close(flush_timeout=1.0)


async def client_role(args: argparse.Namespace) -> None:
    """A warm-up, ``warmed``; on ``go``, ``--count`` connections, ``--concurrency`` at once."""
    from aqueduct.runtime.certs import cert_paths

    certs = cert_paths(args.certs)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def batch(count: int) -> int:
        """``count`` connections by ``--concurrency`` workers; the failures.

        Worker ``w`` is always producer ``w``: after its first connection,
        each is a reconnect of a known producer to its existing stream, as
        in a storm.
        """

        async def worker(w: int) -> int:
            failed = 0
            for _ in range(w, count, args.concurrency):
                try:
                    await _one(args.kind, args.port, certs, w)
                except Exception:  # noqa: BLE001 - a failure is a figure of the run
                    failed += 1
            return failed

        return sum(await asyncio.gather(*(worker(w) for w in range(args.concurrency))))

    await batch(max(WARMUP, args.concurrency))
    print("warmed", flush=True)
    await reader.readline()
    cpu, wall = time.process_time(), time.perf_counter()
    failed = await batch(args.count)
    await asyncio.gather(*_CLOSING, return_exceptions=True)  # their CPU is the connections' too
    print(json.dumps({
        "cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall, "failed": failed,
    }), flush=True)


# ---------------------------------------------------------------- orchestration


async def _spawn(*role: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.handshake_cost", *role,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def measure(args: argparse.Namespace, kind: str, certs: str, profile: Path | None) -> dict[str, Any]:
    """One kind: the server's and the client's CPU per connection."""
    common = ["--certs", certs]
    if kind.startswith("producer"):  # the bridge of the fleet benchmark, with its ingest and log
        log = tempfile.TemporaryDirectory(prefix="aqueduct-handshake-log-")
        transport = "tcp" if kind == "producer-tcp" else "quic"
        server = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.fleet", "--role", "bridge", "--transport", transport,
            "--quic-backend", _backend(kind), "--log", log.name, "--quiet", *common,
            *(["--profile"] if profile else []),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=open(profile / f"{kind}.txt", "w") if profile else None,  # noqa: SIM115 - the child owns it
        )  # fmt: skip
    else:
        log = None
        server = await _spawn(
            "--role", "server", "--kind", kind, *common, *(["--profile", str(profile)] if profile else [])
        )
    client = None
    try:
        port = (await _json_line(server, 60))["port"]

        async def server_cpu() -> float:
            _say(server, "cpu")
            return float((await _json_line(server, 60))["cpu_s"])

        client = await _spawn(
            "--role", "client", "--kind", kind, "--port", str(port), "--count", str(args.count),
            "--concurrency", str(args.concurrency), *common,
        )  # fmt: skip
        assert await _json_line(client, 300) == "warmed"
        idle0 = await server_cpu()
        await asyncio.sleep(1.0)
        before = await server_cpu()
        _say(client, "go")
        done = await _json_line(client, 600)
        after = await server_cpu()
    finally:
        for p in (client, server):
            if p is not None and p.returncode is None:
                if p.stdin is not None:
                    p.stdin.close()
                try:
                    await asyncio.wait_for(p.wait(), 30)
                except TimeoutError:
                    p.kill()
                    await p.wait()
        if log is not None:
            log.cleanup()
    n = args.count - done["failed"]
    return {
        "kind": kind,
        "connections": n,
        "failed": done["failed"],
        "concurrency": args.concurrency,
        "server_cpu_ms_each": 1000 * (after - before) / max(1, n),
        "client_cpu_ms_each": 1000 * done["cpu_s"] / max(1, n),
        "per_second": n / done["wall_s"] if done["wall_s"] else 0.0,
        "server_idle_cpu_ms_per_s": 1000 * (before - idle0),
        "loadavg": os.getloadavg()[0],
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.handshake_cost",
        description="CPU per connection (TCP, TLS, QUIC on each backend, a producer's whole reconnect), "
        "the server's apart from the client's.",
    )
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=[k for k in KINDS if not k.endswith("picoquic")],
                   help="default: all but picoquic's (those need python -m interop.netns)")
    p.add_argument("--count", type=int, default=300, help="connections measured per kind (default 300)")
    p.add_argument("--concurrency", type=int, default=16, help="connections in flight at once (default 16)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--profile", type=Path, metavar="DIR", help="cProfile each server into DIR")
    p.add_argument("--role", choices=["server", "client"], help=argparse.SUPPRESS)
    p.add_argument("--kind", choices=KINDS, help=argparse.SUPPRESS)
    p.add_argument("--certs", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    return p


def _line(r: dict[str, Any]) -> str:
    return (
        f"{r['kind']:24} server {r['server_cpu_ms_each']:7.2f} ms CPU each, client {r['client_cpu_ms_each']:7.2f} ms "
        f"| {r['per_second']:6.0f}/s ({r['connections']} made, {r['failed']} failed, {r['concurrency']} at once) "
        f"| server idle {r['server_idle_cpu_ms_per_s']:.0f} ms CPU/s | load {r['loadavg']:.1f}"
    )


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    from aqueduct.runtime.certs import generate_certs

    out = []
    with tempfile.TemporaryDirectory(prefix="aqueduct-handshake-certs-") as certs:
        generate_certs(certs)
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
        for kind in args.kinds:
            r = await measure(args, kind, certs, args.profile)
            print(_line(r), file=sys.stderr, flush=True)
            out.append(r)
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.role == "server":
        if args.profile:
            profiler = cProfile.Profile()
            profiler.runcall(asyncio.run, server_role(args))
            profiler.dump_stats(args.profile / f"{args.kind}.prof")  # for pstats, or snakeviz
            with open(args.profile / f"{args.kind}.txt", "w") as out:
                pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
                pstats.Stats(profiler, stream=out).sort_stats("cumtime").print_stats(30)
            return 0
        asyncio.run(server_role(args))
        return 0
    if args.role == "client":
        asyncio.run(client_role(args))
        return 0
    results = asyncio.run(main_async(args))
    print(json.dumps(results, indent=1) if args.json else "\n".join(_line(r) for r in results))
    return 0 if all(r["failed"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
