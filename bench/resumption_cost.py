"""``python -m bench.resumption_cost``: server CPU per full and per resumed QUIC handshake on aioquic.

The server (``aqueduct.serve``, aioquic, the bridge's TLS settings) runs in
a process of its own; this one connects ``--connects`` times per kind, one
connection at a time, each carrying the Aqueduct handshake and closing.
The server's CPU (user + system) is read from ``/proc/<pid>/stat`` before
and after, so the figure is the server's alone, not the clients':

- **full**: the client forgets its ticket before each connect (a fleet
  after a bridge restart: the new process knows none of the old tickets);
- **resumed**: each connect presents the ticket of the previous one (a
  reconnect to a server that stayed up, after a network blip).

The kinds alternate over ``--rounds`` rounds so both see the same machine;
prints the median server CPU per handshake (microseconds) of each and
their ratio, and the client's CPU likewise. ``--json`` writes the summary.
Run it under ``flock /tmp/aqueduct-heavy.lock`` on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aqueduct.runtime as rt
from aqueduct.runtime.backends.session_tickets import CLIENT_TICKETS
from bench.common import Certs

HOST = "127.0.0.1"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) process ``pid`` has used (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


async def serve_forever(certs_dir: str) -> None:
    """The server process: prints its port, then accepts and drops connections until killed."""
    certs = Certs.in_directory(certs_dir)
    server = await rt.serve(HOST, 0, certfile=certs.server_cert, keyfile=certs.server_key)
    print(server.port, flush=True)
    async for conn in server:
        del conn  # the client closes it


async def connect_once(port: int, certs: Certs, resume: bool) -> bool:
    if not resume:
        CLIENT_TICKETS.take((HOST, port, HOST))
    tx = await rt.connect(HOST, port, cafile=certs.ca, timeout=30)
    resumed = bool(tx.connection.stats()["quic"]["session_resumed"])
    await tx.connection.close()
    return resumed


async def measure(pid: int, port: int, certs: Certs, resume: bool, connects: int) -> tuple[float, float]:
    """(server, client) CPU seconds per handshake over ``connects`` connects of one kind."""
    await connect_once(port, certs, resume)  # leaves a ticket for the first resumed connect
    server_before, client_before = process_cpu(pid), time.process_time()
    for _ in range(connects):
        if await connect_once(port, certs, resume) != resume:
            raise RuntimeError(f"a connect {'did not resume' if resume else 'resumed'}")
    return (process_cpu(pid) - server_before) / connects, (time.process_time() - client_before) / connects


async def run(args: argparse.Namespace) -> dict[str, object]:
    from aqueduct.runtime.certs import generate_certs

    with tempfile.TemporaryDirectory() as certs_dir:
        generate_certs(certs_dir)
        certs = Certs.in_directory(certs_dir)
        server = subprocess.Popen(
            [sys.executable, "-m", "bench.resumption_cost", "--serve", certs_dir], stdout=subprocess.PIPE, text=True
        )
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            rounds: dict[str, list[tuple[float, float]]] = {"full": [], "resumed": []}
            for _ in range(args.rounds):
                for kind in rounds:
                    rounds[kind].append(await measure(server.pid, port, certs, kind == "resumed", args.connects))
        finally:
            server.terminate()
            server.wait()
    summary: dict[str, object] = {"connects_per_round": args.connects, "rounds": args.rounds}
    server_us = {kind: statistics.median(s for s, _ in figures) * 1e6 for kind, figures in rounds.items()}
    for kind, figures in rounds.items():
        summary[f"{kind}_server_us"] = round(server_us[kind])
        summary[f"{kind}_client_us"] = round(statistics.median(c for _, c in figures) * 1e6)
    summary["server_full_over_resumed"] = round(server_us["full"] / max(1.0, server_us["resumed"]), 2)
    summary["load"] = os.getloadavg()
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connects", type=int, default=200, help="connects per kind per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--serve", metavar="CERTS_DIR", help=argparse.SUPPRESS)  # the server process
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve_forever(args.serve))
        return
    summary = asyncio.run(run(args))
    for kind in ("full", "resumed"):
        print(
            f"{kind:8} server {summary[f'{kind}_server_us']:>6} us/handshake  "
            f"client {summary[f'{kind}_client_us']:>6} us/handshake"
        )
    print(f"server CPU full/resumed: {summary['server_full_over_resumed']}x  (load {summary['load']})")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
