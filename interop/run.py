"""Interop runner: servers x clients x test cases x network scenarios, with a results matrix.

For every combination the runner starts the server endpoint, puts a seeded
lossy proxy (:mod:`interop.proxy`, in this process) in front of it, starts the
client endpoint against the proxy, and waits for both exit codes under a
timeout. Each run gets its own directory with the endpoints' logs and the
proxy's decision log. At the end it writes ``results.json`` and
``matrix.md``.

An implementation is plugged in by naming its endpoint command, optionally
with a label: ``--server 'rust=/path/to/endpoint'``. The command gets the
endpoint contract's arguments appended (``--role ... --testcase ... --host
... --port ...`` plus ``--cert/--key`` or ``--cafile`` and ``--log``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import signal
import socket
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aqueduct.runtime.certs import CertPaths, generate_certs
from aqueduct.runtime.endpoints import BACKENDS
from interop.network import SCENARIOS, scenario
from interop.proxy import LossyProxy
from interop.testcases import ALL_NAMES

HOST = "127.0.0.1"
DEFAULT_IMPLEMENTATION = f"aqueduct-py={shlex.quote(sys.executable)} -m interop.endpoint"
DEFAULT_SCENARIOS = ("clean", "loss", "reorder", "duplicate", "blackhole")
EXIT_UNSUPPORTED = 127
# How long to wait for a server to print that it listens before starting the
# client anyway (QUIC retransmits its first flight, so starting early is safe).
SERVER_READY_WAIT = 5.0
KILL_GRACE = 2.0
FAILURE_GRACE = 5.0

PASSED, FAILED, UNSUPPORTED = "passed", "failed", "unsupported"
SYMBOL = {PASSED: "✓", FAILED: "✗", UNSUPPORTED: "–"}


@dataclass(frozen=True)
class Implementation:
    """A named endpoint command."""

    name: str
    command: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Implementation:
        """``NAME=COMMAND`` or just ``COMMAND`` (named after its first word)."""
        name, sep, command = text.partition("=")
        if not sep or " " in name.strip():
            name, command = "", text
        argv = tuple(shlex.split(command))
        if not argv:
            raise ValueError(f"empty endpoint command in {text!r}")
        return cls(name.strip() or Path(argv[0]).name, argv)


@dataclass(frozen=True)
class RunResult:
    """One cell of the matrix."""

    server: str
    client: str
    testcase: str
    scenario: str
    status: str
    server_exit: int | None
    client_exit: int | None
    seconds: float
    seed: int
    log_dir: str
    note: str = ""
    proxy: dict[str, int] = field(default_factory=dict)


def free_udp_port() -> int:
    """A currently unused loopback UDP port (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


async def _start(argv: list[str], output: Path) -> asyncio.subprocess.Process:
    """Start an endpoint in its own process group (so it can be killed with its children)."""
    with output.open("wb") as out:
        return await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )


async def stop_process(proc: asyncio.subprocess.Process) -> None:
    """Terminate ``proc``'s process group, escalating to SIGKILL; never raises.

    An endpoint that exited may still have left children in its group: they
    are killed too.
    """
    if proc.returncode is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(proc.wait(), KILL_GRACE)
            return
        except TimeoutError:
            continue


async def _wait_listening(output: Path, proc: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + SERVER_READY_WAIT
    while time.monotonic() < deadline and proc.returncode is None:
        if b"listening" in output.read_bytes():
            return
        await asyncio.sleep(0.05)


async def _await_endpoints(
    server: asyncio.subprocess.Process, client: asyncio.subprocess.Process, timeout: float
) -> str:
    """Wait for both endpoints; once one fails, the other gets only a short grace period.

    A failed or unsupported side often leaves its peer waiting for traffic
    that never comes; waiting out the peer's own timeout would only slow the matrix.
    Returns a note for the results (empty when both exited on their own).
    """
    deadline = time.monotonic() + timeout
    waits = {asyncio.ensure_future(p.wait()): p for p in (server, client)}
    pending = set(waits)
    try:
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return f"timed out after {timeout:.0f} s"
            done, pending = await asyncio.wait(pending, timeout=remaining,
                                               return_when=asyncio.FIRST_COMPLETED)
            exits = {waits[t].returncode for t in done}
            if EXIT_UNSUPPORTED in exits:
                return ""  # the peer would wait for a test that never starts
            if exits - {0}:
                deadline = min(deadline, time.monotonic() + FAILURE_GRACE)
        return ""
    finally:
        for t in pending:
            t.cancel()


def _status(server_exit: int | None, client_exit: int | None) -> str:
    if EXIT_UNSUPPORTED in (server_exit, client_exit):
        return UNSUPPORTED
    if server_exit == 0 and client_exit == 0:
        return PASSED
    return FAILED


async def run_one(
    server: Implementation,
    client: Implementation,
    testcase: str,
    scenario_name: str,
    certs: CertPaths,
    run_dir: Path,
    seed: int,
    timeout: float,
) -> RunResult:
    """Run one combination; always stops both endpoints before returning."""
    run_dir.mkdir(parents=True, exist_ok=True)
    server_port = free_udp_port()
    started = time.monotonic()
    common = ["--testcase", testcase, "--host", HOST, "--log", str(run_dir)]
    server_out = run_dir / "server.out"
    procs: list[asyncio.subprocess.Process] = []
    note = ""
    counts: dict[str, int] = {}
    try:
        server_proc = await _start(
            [*server.command, "--role", "server", *common, "--port", str(server_port),
             "--cert", str(certs.server_cert), "--key", str(certs.server_key)],
            server_out,
        )
        procs.append(server_proc)
        config = scenario(scenario_name, seed)
        async with LossyProxy((HOST, 0), (HOST, server_port), config, run_dir / "proxy.jsonl") as proxy:
            await _wait_listening(server_out, server_proc)
            client_proc = await _start(
                [*client.command, "--role", "client", *common, "--port", str(proxy.address[1]),
                 "--cafile", str(certs.ca)],
                run_dir / "client.out",
            )
            procs.append(client_proc)
            note = await _await_endpoints(server_proc, client_proc, timeout)
            counts = {f"{d}.{a}": n for (d, a), n in sorted(proxy.counts.items())}
    finally:
        for proc in procs:
            await stop_process(proc)
    server_exit = procs[0].returncode if procs else None
    client_exit = procs[1].returncode if len(procs) > 1 else None
    status = _status(server_exit, client_exit)
    return RunResult(
        server=server.name, client=client.name, testcase=testcase, scenario=scenario_name,
        status=status, server_exit=server_exit, client_exit=client_exit,
        seconds=round(time.monotonic() - started, 2), seed=seed,
        log_dir=str(run_dir), note=note, proxy=counts,
    )


def render_matrix(results: Iterable[RunResult]) -> str:
    """Markdown: one table per server/client pair, test cases down, scenarios across."""
    results = list(results)
    pairs = list(dict.fromkeys((r.server, r.client) for r in results))
    cases = list(dict.fromkeys(r.testcase for r in results))
    scenarios = list(dict.fromkeys(r.scenario for r in results))
    cell = {(r.server, r.client, r.testcase, r.scenario): r for r in results}
    lines = ["# Interop matrix", "", "✓ passed, ✗ failed, – unsupported (exit 127).", ""]
    for server, client in pairs:
        lines += [f"## server `{server}`, client `{client}`", ""]
        lines.append("| test case | " + " | ".join(scenarios) + " |")
        lines.append("|---|" + "---|" * len(scenarios))
        for case in cases:
            found = (cell.get((server, client, case, scen)) for scen in scenarios)
            marks = [SYMBOL[r.status] if r else " " for r in found]
            lines.append(f"| {case} | " + " | ".join(marks) + " |")
        lines.append("")
    tally = {k: sum(r.status == k for r in results) for k in (PASSED, FAILED, UNSUPPORTED)}
    lines.append(f"{tally[PASSED]} passed, {tally[FAILED]} failed, {tally[UNSUPPORTED]} unsupported.")
    return "\n".join(lines) + "\n"


def _csv(text: str, known: Iterable[str], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in set(known)]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {what}: {', '.join(unknown)}")
    return names


def _default_implementations(backends: list[str]) -> list[Implementation]:
    """This project's endpoint once per QUIC backend (``aqueduct-py`` is aioquic's)."""
    default = Implementation.parse(DEFAULT_IMPLEMENTATION)
    return [
        Implementation(
            default.name if backend == "aioquic" else f"{default.name}-{backend}",
            (*default.command, "--quic-backend", backend),
        )
        for backend in backends
    ]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m interop.run",
        description="Run Aqueduct interop test cases between endpoint implementations "
        "through a seeded lossy UDP proxy and write results.json and matrix.md.",
    )
    p.add_argument("--server", action="append", type=Implementation.parse, metavar="[NAME=]CMD",
                   help="server endpoint command (repeatable); default: this project's endpoint")
    p.add_argument("--client", action="append", type=Implementation.parse, metavar="[NAME=]CMD",
                   help="client endpoint command (repeatable); default: this project's endpoint")
    p.add_argument("--testcases", default=",".join(ALL_NAMES),
                   type=lambda text: _csv(text, ALL_NAMES, "test case"),
                   help="comma-separated test cases (default: all)")
    p.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS),
                   type=lambda text: _csv(text, SCENARIOS, "scenario"),
                   help=f"comma-separated network scenarios out of {', '.join(SCENARIOS)}")
    p.add_argument("--quic-backends", default="aioquic",
                   type=lambda text: _csv(text, BACKENDS, "QUIC backend"),
                   help="with the default endpoints: one server and one client per QUIC backend "
                   f"out of {', '.join(BACKENDS)} (default aioquic), every server against every client")
    p.add_argument("--out", type=Path, default=Path("build/interop"), help="results directory")
    p.add_argument("--seed", type=int, default=1, help="seed of the lossy proxy")
    p.add_argument("--timeout", type=float, default=90.0, help="seconds per run")
    p.add_argument("--json", action="store_true", help="print results as JSON instead of the matrix")
    return p


async def run_matrix(args: argparse.Namespace, results: list[RunResult]) -> None:
    """Every combination in a fixed order, one at a time (runs share no state).

    Results are appended to ``results`` as they come, so an interrupted run
    still reports what it finished.
    """
    # SIGTERM (e.g. from make or CI) must still stop the endpoints' process groups.
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    defaults = _default_implementations(args.quic_backends)
    servers = args.server or defaults
    clients = args.client or defaults
    certs = generate_certs(args.out / "certs", overwrite=True)
    total = len(servers) * len(clients) * len(args.testcases) * len(args.scenarios)
    for scen in args.scenarios:
        for server in servers:
            for client in clients:
                for case in args.testcases:
                    run_dir = args.out / "runs" / f"{server.name}_{client.name}" / scen / case
                    result = await run_one(
                        server, client, case, scen, certs, run_dir, args.seed, args.timeout
                    )
                    results.append(result)
                    print(
                        f"[{len(results)}/{total}] {scen:<10} {server.name} -> {client.name} "
                        f"{case:<17} {result.status:<11} ({result.seconds:.1f} s)",
                        file=sys.stderr if args.json else sys.stdout,
                        flush=True,
                    )


def write_report(args: argparse.Namespace, results: list[RunResult]) -> None:
    """``results.json`` and ``matrix.md`` in ``--out``, and the matrix (or JSON) on stdout."""
    as_json = json.dumps([asdict(r) for r in results], indent=2)
    (args.out / "results.json").write_text(as_json + "\n", encoding="utf-8")
    matrix = render_matrix(results)
    (args.out / "matrix.md").write_text(matrix, encoding="utf-8")
    if args.json:
        print(as_json)
    else:
        print(matrix)
        print(f"results: {args.out / 'results.json'}, matrix: {args.out / 'matrix.md'}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results: list[RunResult] = []
    try:
        asyncio.run(run_matrix(args, results))
    except (asyncio.CancelledError, KeyboardInterrupt):
        print(f"interrupted after {len(results)} runs; endpoints stopped", file=sys.stderr)
        write_report(args, results)
        return 130
    write_report(args, results)
    return 1 if any(r.status == FAILED for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
