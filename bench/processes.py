"""Servers a benchmark or a test runs as processes on this machine: ports they can come back on, and lifetimes.

A port found free by binding port 0 lies in the kernel's ephemeral range,
from which every outgoing connection and every other port-0 bind draws
its local port too: while a restarted server is down, a client retrying
against it (a TCP connect to a port nobody listens on can even connect to
itself) or a test on the other xdist worker may take that very number, and
the restart fails with "address already in use". A port below the range is
never handed out by the kernel; only another process choosing the same
number at random could take it (:func:`free_port`).

A server process started with :data:`DIE_WITH_THE_PARENT` before its
command gets SIGTERM when the process that started it dies, so a run that
is killed leaves no bridge behind.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["DIE_WITH_THE_PARENT", "LOWEST", "ephemeral_start", "free_port"]

LOWEST = 10000  # below: ports well-known services may use

#: the prefix of a command whose process gets SIGTERM when its parent dies
DIE_WITH_THE_PARENT = ["setpriv", "--pdeathsig", "TERM"]


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768 on Linux by default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port of ``kind`` free on 127.0.0.1 now, outside the ephemeral range."""
    chooser = random.SystemRandom()
    for _ in range(200):
        port = chooser.randrange(LOWEST, ephemeral_start())
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise OSError(f"no free port between {LOWEST} and {ephemeral_start()}")
