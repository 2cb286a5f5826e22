"""Run a command in a network namespace of its own whose only interface is loopback.

A picoquic server (through aiopquic) listens on every interface: it cannot
bind one chosen address. Our tests, interop runs and benchmarks may use
loopback addresses only, so they run such a server where *every interface*
is loopback: a fresh network namespace (Linux, ``unshare --user --net``,
no privileges needed where user namespaces are allowed). Everything a run
starts inherits the namespace: servers, clients, Spark.

    python -m interop.netns -- python -m pytest -m picoquic_server tests/integration

prints why and exits 2 when the machine refuses a namespace; ``--or-run``
then runs the command where it is instead (its picoquic-server tests skip,
saying why).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
EXIT_REFUSED = 2


def isolated_loopback() -> bool:
    """True when loopback is this process's only network interface, and it is up.

    Then a socket bound to every interface is reachable from loopback only.
    """
    names = [name for _, name in socket.if_nameindex()]
    return names == ["lo"] and _loopback_flags() & IFF_UP != 0


def _loopback_flags() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH22x", b"lo", 0)
        return struct.unpack_from("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]


def _bring_loopback_up() -> None:
    """A new namespace's loopback starts down (``ip link set lo up``, without iproute2)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", _loopback_flags() | IFF_UP))


def namespace_refusal() -> str | None:
    """Why this machine will not give us a network namespace, or None if it will."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are Linux's; this is {sys.platform}"
    if shutil.which("unshare") is None:
        return "the unshare command (util-linux) is not installed"
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--net", "true"], capture_output=True, text=True, timeout=30
    )
    if probe.returncode != 0:
        return f"unshare --user --net was refused: {probe.stderr.strip() or probe.returncode}"
    return None


def run_isolated(command: list[str]) -> int:
    """Run ``command`` in a new user + network namespace with loopback up; its exit code."""
    inner = [sys.executable, "-m", "interop.netns", "--inside", "--", *command]
    return subprocess.call(["unshare", "--user", "--map-root-user", "--net", *inner])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m interop.netns",
        description="Run a command in a network namespace whose only interface is loopback "
        "(for picoquic servers, which listen on every interface).",
    )
    p.add_argument("--or-run", action="store_true",
                   help="if the machine refuses a namespace, say why and run the command here instead")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)  # second stage, in the namespace
    p.add_argument("command", nargs="+", help="the command (after --)")
    args = p.parse_args(argv)
    if args.inside:
        _bring_loopback_up()
        os.execvp(args.command[0], args.command)
    refusal = namespace_refusal()
    if refusal is None:
        return run_isolated(args.command)
    print(f"interop.netns: no isolated network namespace here: {refusal}", file=sys.stderr)
    if args.or_run:
        return subprocess.call(args.command)
    return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
