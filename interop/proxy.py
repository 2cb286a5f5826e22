"""Lossy UDP proxy between an interop client and server (loopback only).

The client talks to the proxy's listen address; the proxy relays every
datagram to the target through one upstream socket per client address (a tiny
NAT), and relays the answers back. What happens to each datagram is decided by
the seeded :class:`interop.network.Link` of its direction; this module only
does the I/O: timers for delays, a buffer for held (reordered) datagrams, and
a JSON-lines log of every decision.

In-process use (pytest)::

    async with LossyProxy(("127.0.0.1", 0), ("127.0.0.1", port), scenario("loss")) as proxy:
        await aqueduct.connect(*proxy.address, cafile=...)

Command line: ``python -m interop.proxy --help``.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import signal
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO, cast

from interop.network import SCENARIOS, Action, Decision, Link, LinkConfig, NetworkConfig, scenario

Address = tuple[str, int]


def loopback_address(host: str, port: int) -> Address:
    """Validate that ``host`` is a loopback IP: the proxy must never touch a real network."""
    if host == "localhost":
        host = "127.0.0.1"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"address {host!r} is not an IP address; use 127.0.0.1") from None
    if not ip.is_loopback:
        raise ValueError(f"address {host} is not a loopback address; the proxy is loopback-only")
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range")
    return (str(ip), port)


class _Direction:
    """One direction: a link model plus the held datagrams waiting for release."""

    def __init__(self, name: str, link: Link, proxy: LossyProxy) -> None:
        self.name = name
        self.link = link
        self.proxy = proxy
        self.held: dict[int, tuple[bytes, tuple[float, ...], Callable[[bytes], None]]] = {}
        self.timer: asyncio.TimerHandle | None = None

    def handle(self, data: bytes, send: Callable[[bytes], None]) -> None:
        now = self.proxy.now()
        decision = self.link.submit(now)
        self.proxy.record(self.name, now, decision, len(data))
        if decision.action is Action.FORWARD:
            self._send(data, decision.delays, send)
        elif decision.action is Action.HOLD:
            self.held[decision.index] = (data, decision.delays, send)
        self._release(now, decision.release)
        self._arm_timer()

    def _send(self, data: bytes, delays: tuple[float, ...], send: Callable[[bytes], None]) -> None:
        loop = asyncio.get_running_loop()
        for delay in delays:
            if delay <= 0:
                send(data)
            else:
                loop.call_later(delay, send, data)

    def _release(self, now: float, indices: tuple[int, ...]) -> None:
        for index in indices:
            data, delays, send = self.held.pop(index)
            self.proxy.log_event({"t": round(now, 6), "dir": self.name, "index": index, "action": "release"})
            self._send(data, delays, send)

    def _arm_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        due = self.link.next_expiry()
        if due is not None:
            delay = max(0.0, due - self.proxy.now())
            self.timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self.timer = None
        now = self.proxy.now()
        self._release(now, self.link.expire(now))
        self._arm_timer()

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.held.clear()


class _Listener(asyncio.DatagramProtocol):
    def __init__(self, proxy: LossyProxy) -> None:
        self.proxy = proxy

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.proxy._from_client(data, (addr[0], addr[1]))


class _Upstream(asyncio.DatagramProtocol):
    """The proxy's socket towards the target, for one client address."""

    def __init__(self, proxy: LossyProxy, client: Address) -> None:
        self.proxy = proxy
        self.client = client
        self.transport: asyncio.DatagramTransport | None = None
        self.pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)
        for data in self.pending:
            self.transport.sendto(data)
        self.pending.clear()

    def send(self, data: bytes) -> None:
        if self.transport is None:
            self.pending.append(data)
        elif not self.transport.is_closing():
            self.transport.sendto(data)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.proxy._from_server(data, self.client)

    def error_received(self, exc: Exception) -> None:
        # ICMP "port unreachable" while the server is (re)starting: UDP semantics, drop.
        pass


class LossyProxy:
    """Asyncio UDP relay applying a :class:`NetworkConfig`; an async context manager.

    ``listen`` may use port 0; the bound address is then :attr:`address`.
    ``log`` (an open text file or a path) receives one JSON object per line
    for every decision. :attr:`counts` tallies actions per direction.
    """

    def __init__(
        self,
        listen: Address,
        target: Address,
        config: NetworkConfig | None = None,
        log: TextIO | Path | None = None,
    ) -> None:
        self.listen = loopback_address(*listen)
        self.target = loopback_address(*target)
        self.config = config or NetworkConfig()
        c2s, s2c = self.config.links()
        self._c2s = _Direction("c2s", c2s, self)
        self._s2c = _Direction("s2c", s2c, self)
        self._log_path = log if isinstance(log, Path) else None
        self._log: TextIO | None = None if isinstance(log, Path) else log
        self._listener: asyncio.DatagramTransport | None = None
        self._upstreams: dict[Address, _Upstream] = {}
        self._epoch: float | None = None
        self.counts: Counter[tuple[str, str]] = Counter()

    @property
    def address(self) -> Address:
        """The bound listen address (useful with port 0)."""
        if self._listener is None:
            raise RuntimeError("LossyProxy is not started")
        host, port = self._listener.get_extra_info("sockname")[:2]
        return (host, port)

    async def start(self) -> None:
        if self._log_path is not None:
            self._log = self._log_path.open("a", encoding="utf-8", buffering=1)
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _Listener(self), local_addr=self.listen
        )
        self._listener = transport

    async def close(self) -> None:
        self._c2s.close()
        self._s2c.close()
        for upstream in self._upstreams.values():
            if upstream.transport is not None:
                upstream.transport.close()
        self._upstreams.clear()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._log is not None:
            self._log.flush()
            if self._log_path is not None:
                self._log.close()
                self._log = None

    async def __aenter__(self) -> LossyProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def now(self) -> float:
        """Seconds since the first datagram: the clock of blackhole periods.

        Starting at the first datagram (not at proxy start) makes the first
        up period cover the handshake however long the endpoints take to start.
        """
        loop_now = asyncio.get_running_loop().time()
        if self._epoch is None:
            self._epoch = loop_now
        return loop_now - self._epoch

    def record(self, direction: str, now: float, decision: Decision, size: int) -> None:
        action = decision.action.value
        if decision.action is Action.FORWARD and decision.duplicated:
            action = "duplicate"
        self.counts[(direction, action)] += 1
        event: dict[str, Any] = {
            "t": round(now, 6),
            "dir": direction,
            "index": decision.index,
            "size": size,
            "action": action,
        }
        if decision.reason is not None:
            event["reason"] = decision.reason.value
        if decision.delays and any(decision.delays):
            event["delays"] = [round(d, 6) for d in decision.delays]
        self.log_event(event)

    def log_event(self, event: dict[str, Any]) -> None:
        if self._log is not None:
            self._log.write(json.dumps(event, separators=(",", ":")) + "\n")

    def _from_client(self, data: bytes, client: Address) -> None:
        upstream = self._upstreams.get(client)
        if upstream is None:
            upstream = _Upstream(self, client)
            self._upstreams[client] = upstream
            loop = asyncio.get_running_loop()
            loop.create_task(
                loop.create_datagram_endpoint(
                    lambda: upstream, local_addr=(self.target[0], 0), remote_addr=self.target
                )
            )
        self._c2s.handle(data, upstream.send)

    def _from_server(self, data: bytes, client: Address) -> None:
        self._s2c.handle(data, lambda d: self._to_client(d, client))

    def _to_client(self, data: bytes, client: Address) -> None:
        # Delayed copies may fire after close(): drop them like the network would.
        if self._listener is not None and not self._listener.is_closing():
            self._listener.sendto(data, client)


# ---------------------------------------------------------------- command line


def _host_port(text: str) -> Address:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    try:
        return loopback_address(host, int(port))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _blackhole(text: str) -> tuple[float, float]:
    up, _, down = text.partition(",")
    try:
        return (float(up), float(down))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected UP,DOWN seconds, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m interop.proxy",
        description="Seeded lossy UDP proxy for Aqueduct interop tests (loopback addresses only). "
        "Start from a named scenario, then override single impairments.",
    )
    p.add_argument("--listen", type=_host_port, required=True, help="HOST:PORT the client sends to")
    p.add_argument("--target", type=_host_port, required=True, help="HOST:PORT of the server")
    p.add_argument("--scenario", default="clean", choices=sorted(SCENARIOS), help="base impairments")
    p.add_argument("--seed", type=int, default=0, help="random seed (same seed, same decisions)")
    p.add_argument("--log", type=Path, help="append one JSON line per decision to this file")
    p.add_argument(
        "--direction",
        choices=("both", "c2s", "s2c"),
        default="both",
        help="which direction the overrides below apply to",
    )
    p.add_argument("--drop", type=float, dest="drop_rate", help="random loss probability")
    p.add_argument("--burst-rate", type=float, help="probability per datagram to start a burst")
    p.add_argument("--burst-length", type=float, help="mean burst length in datagrams")
    p.add_argument(
        "--drop-index",
        type=int,
        action="append",
        dest="drop_indices",
        help="drop datagram number N of the direction (0-based; repeatable)",
    )
    p.add_argument("--duplicate", type=float, dest="duplicate_rate", help="duplication probability")
    p.add_argument("--delay", type=float, help="added delay in seconds")
    p.add_argument("--jitter", type=float, help="extra uniform delay in [0, JITTER) seconds")
    p.add_argument("--reorder", type=float, dest="reorder_rate", help="probability to hold a datagram")
    p.add_argument("--reorder-gap", type=int, help="held datagram is released after N later ones")
    p.add_argument(
        "--blackhole", type=_blackhole, metavar="UP,DOWN", help="alternate UP s open / DOWN s dropped"
    )
    return p


def config_from_args(args: argparse.Namespace) -> NetworkConfig:
    """The scenario named by ``--scenario`` with the command line's overrides applied."""
    base = scenario(args.scenario, args.seed)
    overrides: dict[str, Any] = {}
    for name in (
        "drop_rate",
        "burst_rate",
        "burst_length",
        "duplicate_rate",
        "delay",
        "jitter",
        "reorder_rate",
        "reorder_gap",
    ):
        value = getattr(args, name)
        if value is not None:
            overrides[name] = value
    if args.drop_indices:
        overrides["drop_indices"] = frozenset(args.drop_indices)
    if args.blackhole is not None:
        overrides["blackhole_up"], overrides["blackhole_down"] = args.blackhole

    def apply(link: LinkConfig, direction: str) -> LinkConfig:
        if args.direction in ("both", direction):
            return replace(link, **overrides)
        return link

    return replace(
        base,
        client_to_server=apply(base.client_to_server, "c2s"),
        server_to_client=apply(base.server_to_client, "s2c"),
    )


async def _serve(args: argparse.Namespace, config: NetworkConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with LossyProxy(args.listen, args.target, config, log=args.log) as proxy:
        host, port = proxy.address
        print(f"proxy listening on {host}:{port} -> {args.target[0]}:{args.target[1]}", flush=True)
        await stop.wait()
        summary = {f"{d}.{a}": n for (d, a), n in sorted(proxy.counts.items())}
        print(json.dumps(summary), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    asyncio.run(_serve(args, config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
