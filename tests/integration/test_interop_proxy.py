"""The lossy proxy relays real UDP datagrams on loopback and applies its link decisions."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from interop.network import LinkConfig, NetworkConfig, scenario
from interop.proxy import LossyProxy, build_parser, config_from_args, loopback_address


class _Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        self.transport.sendto(b"echo:" + data, addr)


class _Collect(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.received: list[bytes] = []

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        self.received.append(data)


async def _exchange(config: NetworkConfig, count: int, log: Path | None = None) -> list[bytes]:
    """Send ``count`` datagrams through a proxy to an echo server; return the echoes received."""
    loop = asyncio.get_running_loop()
    echo, _ = await loop.create_datagram_endpoint(_Echo, local_addr=("127.0.0.1", 0))
    target = echo.get_extra_info("sockname")[:2]
    try:
        async with LossyProxy(("127.0.0.1", 0), target, config, log=log) as proxy:
            client, collect = await loop.create_datagram_endpoint(
                _Collect, remote_addr=proxy.address
            )
            for i in range(count):
                client.sendto(f"{i}".encode())
                await asyncio.sleep(0.001)
            seen = -1
            for _ in range(100):  # bounded wait until stragglers (held, delayed) stop coming
                await asyncio.sleep(0.05)
                if len(collect.received) == seen:
                    break
                seen = len(collect.received)
            client.close()
            return collect.received
    finally:
        echo.close()


async def test_clean_proxy_relays_both_ways() -> None:
    echoes = await _exchange(NetworkConfig(), 50)
    assert sorted(echoes) == sorted(f"echo:{i}".encode() for i in range(50))


async def test_scripted_drops_and_log_lines(tmp_path: Path) -> None:
    log = tmp_path / "proxy.jsonl"
    config = NetworkConfig(client_to_server=LinkConfig(drop_indices=frozenset({2, 5})))
    echoes = await _exchange(config, 10, log)
    assert sorted(echoes) == sorted(f"echo:{i}".encode() for i in range(10) if i not in (2, 5))
    events = [json.loads(line) for line in log.read_text().splitlines()]
    drops = [e for e in events if e["action"] == "drop"]
    assert [(e["dir"], e["index"], e["reason"]) for e in drops] == [("c2s", 2, "index"), ("c2s", 5, "index")]
    assert sum(e["dir"] == "s2c" and e["action"] == "forward" for e in events) == 8


async def test_duplicates_and_reordering_arrive_complete() -> None:
    link = LinkConfig(duplicate_rate=0.3, reorder_rate=0.3, reorder_gap=2, reorder_max_hold=0.02)
    echoes = await _exchange(NetworkConfig(client_to_server=link, seed=5), 60)
    assert set(echoes) == {f"echo:{i}".encode() for i in range(60)}
    assert len(echoes) > 60  # some duplicated


@pytest.mark.parametrize("host", ["10.0.0.1", "0.0.0.0", "example.com"])
def test_non_loopback_addresses_are_refused(host: str) -> None:
    with pytest.raises(ValueError, match="loopback|not an IP"):
        loopback_address(host, 4433)


def test_command_line_help_and_refusal() -> None:
    help_out = subprocess.run(
        [sys.executable, "-m", "interop.proxy", "--help"], capture_output=True, text=True, timeout=30
    )
    assert help_out.returncode == 0 and "--scenario" in help_out.stdout
    refused = subprocess.run(
        [sys.executable, "-m", "interop.proxy", "--listen", "192.168.1.1:9", "--target", "127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode == 2 and "loopback" in refused.stderr


def test_command_line_overrides_apply_to_the_chosen_direction() -> None:
    args = build_parser().parse_args(
        ["--listen", "127.0.0.1:1", "--target", "127.0.0.1:2", "--scenario", "loss", "--seed", "9",
         "--direction", "s2c", "--drop-index", "2", "--drop-index", "5", "--blackhole", "1,0.5"]
    )
    config = config_from_args(args)
    assert config.seed == 9
    assert config.client_to_server == scenario("loss").client_to_server
    assert config.server_to_client.drop_indices == frozenset({2, 5})
    assert (config.server_to_client.blackhole_up, config.server_to_client.blackhole_down) == (1.0, 0.5)
    assert config.server_to_client.drop_rate == scenario("loss").server_to_client.drop_rate
