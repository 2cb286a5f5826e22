"""Pieces shared by every benchmark role: the receive meter, idle watchdog, paced sending.

The receiver measures, never the sender: a rate is what arrived between the
end of the warm-up and the last arrival, so process start-up, the TLS
handshake and whatever a sender merely buffered never count.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# How often a sending loop looks at the clock (a clock read per message would
# cost the same on both paths, but it is noise we do not need).
CLOCK_EVERY = 64


@dataclass
class Meter:
    """Counts arrivals after a warm-up period that starts at the first arrival."""

    warmup: float
    first: float | None = None
    start: float | None = None
    last: float | None = None
    messages: int = 0
    nbytes: int = 0
    warm_messages: int = 0

    def add(self, messages: int, nbytes: int) -> None:
        now = time.perf_counter()
        if self.start is None:
            if self.first is None:
                self.first = now
            if now - self.first < self.warmup:
                self.warm_messages += messages
                self.last = now
                return
            self.start = now  # this arrival opens the window; it is not inside it
            self.last = now
            return
        self.messages += messages
        self.nbytes += nbytes
        self.last = now

    def result(self) -> dict[str, Any]:
        """Rates over the measured window (zeros when nothing arrived after the warm-up)."""
        seconds = (self.last - self.start) if self.start is not None and self.last else 0.0
        ok = seconds > 0 and (self.messages > 0 or self.nbytes > 0)
        return {
            "messages": self.messages,
            "bytes": self.nbytes,
            "warmup_messages": self.warm_messages,
            "seconds": seconds,
            "msg_per_s": self.messages / seconds if ok else 0.0,
            "mb_per_s": self.nbytes / seconds / 1e6 if ok else 0.0,
        }


async def run_until_idle(
    work: Awaitable[Any], meter: Meter, idle: float, limit: float
) -> str:
    """Run ``work`` until it ends, nothing arrived for ``idle`` seconds, or ``limit`` passed.

    Returns how it ended ("done", "idle", "limit"). UNRELIABLE receivers need
    this: nothing guarantees that the final message arrives.
    """
    task = asyncio.ensure_future(work)
    began = time.perf_counter()
    while not task.done():
        await asyncio.wait({task}, timeout=min(idle, 0.2))
        now = time.perf_counter()
        quiet_since = meter.last if meter.last is not None else began
        if task.done():
            break
        if now - quiet_since > idle:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return "idle"
        if now - began > limit:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return "limit"
    task.result()
    return "done"


async def send_for(
    seconds: float, send_one: Callable[[], Awaitable[None] | None], yield_every: int = 0
) -> int:
    """Call ``send_one`` as fast as it allows for ``seconds``; returns how many were sent.

    ``send_one`` may be a plain function or return an awaitable (it is awaited).
    ``yield_every`` > 0 gives the event loop a turn every that many messages,
    for senders that never block on their own (datagrams).
    """
    deadline = time.perf_counter() + seconds
    sent = 0
    step = CLOCK_EVERY if yield_every <= 0 else min(CLOCK_EVERY, yield_every)
    while time.perf_counter() < deadline:
        for _ in range(step):
            pending = send_one()
            if pending is not None:
                await pending
        sent += step
        if yield_every > 0:
            await asyncio.sleep(0)
    return sent


def payload(size: int) -> bytes:
    """One message body, random so nothing along the path can shortcut it."""
    return os.urandom(size)


@dataclass(frozen=True)
class Certs:
    """The throw-away TLS files every role of one run uses (made by ``bench.run``)."""

    ca: Path
    server_cert: Path
    server_key: Path

    @classmethod
    def in_directory(cls, directory: str | os.PathLike[str]) -> Certs:
        from aqueduct.runtime.certs import cert_paths

        p = cert_paths(directory)
        return cls(ca=p.ca, server_cert=p.server_cert, server_key=p.server_key)


SERVER_NAME = "localhost"


def listen_host(backend: str) -> str:
    """Where a benchmark server listens: 127.0.0.1, or every interface for picoquic.

    picoquic cannot bind one address; its benchmarks run only where loopback
    is the only interface (``python -m interop.netns -- python -m bench.run``).
    """
    if backend != "picoquic":
        return "127.0.0.1"
    from interop.netns import isolated_loopback

    if not isolated_loopback():
        raise RuntimeError("a picoquic server listens on every interface: run under python -m interop.netns")
    return "::"
"""Name the client verifies in the server certificate (generate_certs lists it)."""


def sending_bound(params: dict[str, Any]) -> float:
    """Seconds the producer's phases may take (sending plus draining), warm-up phase included."""
    runs = params.get("phases", 1) + (1 if params.get("paced_rate") else 0)
    warm = params.get("warm_seconds", 0.0)
    return runs * (params["seconds"] + params["limit"]) + (warm + params["limit"] if warm else 0.0)
