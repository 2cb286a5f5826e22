"""Interop endpoint: one role of one test case, as a process with a meaningful exit code.

``python -m interop.endpoint --role server|client --testcase NAME --host H
--port P [--cert F --key F | --cafile F] [--log DIR]``

Exit codes (the interop runner's contract): 0 success, 1 failure (including
a timeout), 127 test case not supported. The server handles exactly one
connection and exits; both roles give up after ``--timeout`` seconds so a
stuck peer can never hang the matrix.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import aqueduct
from aqueduct.runtime.endpoints import BACKENDS, check_backend
from interop import connector_resume
from interop.netns import isolated_loopback
from interop.testcases import ALL_NAMES, TESTCASES, CaseFailed, TestCase, run_client, run_server

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNSUPPORTED = 127
DEFAULT_TIMEOUT = 60.0
# After its verdict the server waits this long for the client to close the
# connection, so the verdict is not cut off by an early close.
LINGER = 5.0

log = logging.getLogger("interop.endpoint")


async def serve_one(case: TestCase, server: Any) -> str:
    """Run the server half on the first connection of a started ``server``, then close it."""
    try:
        async for conn in server:
            log.info("connection accepted")
            try:
                return await run_server(case, conn.entrypoint)
            finally:
                # With a verdict, the client closes once it has read it; without
                # one (handshake), the server's close is the client's signal.
                if case.uses_verdict:
                    await _linger(conn)
                await conn.close()
        raise CaseFailed("server stopped before a connection arrived")
    finally:
        await server.close()


async def _linger(conn: Any) -> None:
    """Give the client time to read the last messages and close the connection itself."""
    try:
        await asyncio.wait_for(conn.wait_closed(), LINGER)
    except TimeoutError:
        log.info("client did not close within %.0f s; closing", LINGER)


async def connect_and_run(
    case: TestCase,
    host: str,
    port: int,
    cafile: Path | None,
    frame_log: Path | None = None,
    quic_backend: str = "aioquic",
) -> str:
    """Connect, run the client half on the entrypoint, then close the connection."""
    entry = await aqueduct.connect(host, port, cafile=cafile, frame_log=frame_log, backend=quic_backend)
    log.info("connected to %s:%d", host, port)
    try:
        return await run_client(case, entry)
    finally:
        await entry.connection.close()


async def _role(case: TestCase | None, args: argparse.Namespace) -> str:
    if case is None:  # connector-resume: connector sessions over Aqueduct
        if args.role == "client":
            return await connector_resume.run_client(args.host, args.port, args.cafile, args.quic_backend)
        return await connector_resume.run_server(_listen_host(args), args.port, args.cert, args.key, args.quic_backend)
    # The frame log (every Aqueduct frame sent and received) is what makes a
    # failed interop run diagnosable after the fact.
    frame_log = args.log / f"{args.role}-frames.jsonl" if args.log else None
    if args.role == "client":
        return await connect_and_run(case, args.host, args.port, args.cafile, frame_log, args.quic_backend)
    server = await aqueduct.serve(
        _listen_host(args),
        args.port,
        certfile=args.cert,
        keyfile=args.key,
        frame_log=frame_log,
        backend=args.quic_backend,
        **case.server_options,
    )
    log.info("listening on %s:%d", args.host, args.port)
    return await serve_one(case, server)


def _listen_host(args: argparse.Namespace) -> str:
    """Where the server listens: ``--host``, but for picoquic every interface when loopback is the only one.

    picoquic (through aiopquic) cannot bind one address; in a network
    namespace of loopback only (``python -m interop.netns -- python -m
    interop.run ...``) every interface is loopback, so "::" reaches no
    further than ``--host``. Elsewhere the picoquic server is unsupported.
    """
    if args.quic_backend == "picoquic" and isolated_loopback():
        return "::"
    return args.host


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m interop.endpoint",
        description="One side of an Aqueduct interop test case. "
        "Exit 0 = passed, 1 = failed, 127 = test case not supported.",
    )
    p.add_argument("--role", choices=("server", "client"), required=True)
    p.add_argument("--testcase", required=True, help=f"one of: {', '.join(ALL_NAMES)}")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cert", type=Path, help="server certificate (PEM)")
    p.add_argument("--key", type=Path, help="server private key (PEM)")
    p.add_argument("--cafile", type=Path, help="CA that signed the server certificate (client)")
    p.add_argument("--quic-backend", choices=BACKENDS, default="aioquic",
                   help="QUIC stack: aioquic (default) or picoquic (needs the picoquic extra; "
                   "a picoquic server runs only where loopback is the only interface: python -m interop.netns)")
    p.add_argument("--log", type=Path, help="directory for this endpoint's log file")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="give up after N seconds")
    return p


def _setup_logging(role: str, directory: Path | None) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(directory / f"{role}.log", encoding="utf-8"))
    logging.basicConfig(
        level=logging.WARNING,
        format=f"%(asctime)s {role} %(name)s %(levelname)s %(message)s",
        handlers=handlers,
    )
    logging.getLogger("interop").setLevel(logging.INFO)


async def _run(name: str, case: TestCase | None, args: argparse.Namespace) -> int:
    try:
        summary = await asyncio.wait_for(_role(case, args), args.timeout)
    except CaseFailed as exc:  # its message already names the test case
        log.error("FAILED %s", exc)
        return EXIT_FAILED
    except TimeoutError:
        log.error("FAILED %s: no result within %.0f s", name, args.timeout)
        return EXIT_FAILED
    except Exception as exc:  # any library error is a failed test, reported by name
        log.error("FAILED %s: %s: %s", name, type(exc).__name__, exc)
        return EXIT_FAILED
    log.info("PASSED %s: %s", name, summary)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.role, args.log)
    if args.testcase not in ALL_NAMES:
        log.warning("test case %r is not supported", args.testcase)
        return EXIT_UNSUPPORTED
    case = TESTCASES.get(args.testcase)
    if args.role == "server" and (args.cert is None or args.key is None):
        log.error("--role server needs --cert and --key")
        return EXIT_FAILED
    try:
        check_backend(args.quic_backend, serve_on=_listen_host(args) if args.role == "server" else None)
    except ValueError as exc:  # a backend this machine lacks, or one that cannot serve here
        log.warning("--quic-backend %s: %s", args.quic_backend, exc)
        return EXIT_UNSUPPORTED
    return asyncio.run(_run(args.testcase, case, args))


if __name__ == "__main__":
    sys.exit(main())
