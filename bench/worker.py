"""One side (server or client) of the benchmarks, as a long-lived process.

``python -m bench.worker SIDE --certs DIR --cpu N`` pins itself to one CPU
core, then reads one JSON command per line from stdin:
``{"role": ..., "params": {...}, "port": N, "profile": FILE}`` and runs that
role's side in a fresh event loop. A server prints ``READY <port>`` once it
listens; both print ``RESULT <json>`` (or ``ERROR <json>``) when done.

Keeping the processes between measurements means each one costs a
handshake, not an interpreter start with aioquic/cryptography imports
(seconds on a busy machine). A fresh process pair is still used per
benchmark (see :mod:`bench.harness`).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from bench.common import Certs

# role -> module holding serve_<name> and send_<name>
ROLES: dict[str, str] = {
    "raw.bulk": "bench.raw_quic",
    "raw.small": "bench.raw_quic",
    "raw.stream_per_message": "bench.raw_quic",
    "raw.datagram": "bench.raw_quic",
    "rawpq.bulk": "bench.raw_picoquic",
    "rawpq.small": "bench.raw_picoquic",
    "rawpq.datagram": "bench.raw_picoquic",
    "rawqh3.bulk": "bench.raw_qh3",
    "rawqh3.small": "bench.raw_qh3",
    "rawqh3.datagram": "bench.raw_qh3",
    "ours.ordered": "bench.ours_quic",
    "ours.unordered": "bench.ours_quic",
    "ours.unreliable": "bench.ours_quic",
    "connector.aqueduct": "bench.connector_ingest",
    "connector.tcp": "bench.connector_ingest",
    "bridge.e2e": "bench.bridge_bench",
    "bridge.memory": "bench.bridge_bench",
    "latency.bridge": "bench.latency",
}


def role_function(role: str, side: str) -> Callable[..., Awaitable[dict[str, Any]]]:
    """The coroutine function running ``side`` ("server" or "client") of ``role``."""
    module = importlib.import_module(ROLES[role])
    prefix = "serve_" if side == "server" else "send_"
    return getattr(module, prefix + role.split(".", 1)[1])


def pin_to_cpu(cpu: int) -> None:
    """Run on ``cpu`` only, when the machine lets us (no-op with one core or no affinity API)."""
    if cpu < 0 or not hasattr(os, "sched_setaffinity"):
        return
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) > 1:
        os.sched_setaffinity(0, {allowed[cpu % len(allowed)]})


def emit(kind: str, value: Any) -> None:
    sys.stdout.write(f"{kind} {json.dumps(value)}\n")
    sys.stdout.flush()


def run_command(side: str, certs: Certs, command: dict[str, Any]) -> dict[str, Any]:
    """Run one role's side to completion (profiled to ``command["profile"]`` if given)."""
    fn = role_function(command["role"], side)
    params = command["params"]
    if side == "server":
        main = fn(params, certs, lambda port: emit("READY", port))
    else:
        main = fn(params, certs, command["port"])
    gc.collect()
    cpu = time.process_time()
    if command.get("profile"):
        profiler = cProfile.Profile()
        result = profiler.runcall(asyncio.run, main)
        profiler.dump_stats(command["profile"])
    else:
        result = asyncio.run(main)
    # CPU seconds of this side's whole run (all threads): a per-message cost
    # that, unlike a rate, barely depends on what else the machine is doing.
    return {**result, "cpu_s": time.process_time() - cpu}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.worker")
    parser.add_argument("side", choices=["server", "client"])
    parser.add_argument("--certs", required=True, help="directory made by generate_certs")
    parser.add_argument("--cpu", type=int, default=-1, help="CPU index to pin to (-1: no pinning)")
    args = parser.parse_args(argv)
    pin_to_cpu(args.cpu)
    certs = Certs.in_directory(args.certs)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            emit("RESULT", run_command(args.side, certs, json.loads(line)))
        except Exception as exc:  # report and keep serving: the harness decides
            emit("ERROR", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
