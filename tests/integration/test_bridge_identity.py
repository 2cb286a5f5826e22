"""Who may feed a bridge: stream ids of one's own, the cookie kept off ``ps``, mutual TLS.

A real bridge (log, ingest, QUIC and TCP listeners; no Spark: a stand-in
consumer commits whatever is complete, as a query would, so producers get
their acks) and real ``aqueduct-produce`` processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aqueduct.bridge.app.service import Bridge, BridgeConfig
from aqueduct.connector.producer.cli import derived_stream_id
from aqueduct.runtime.certs import CertPaths, generate_certs
from tests.waiting import finish

TIMEOUT = 60.0
STAND_IN = "stand-in"  # the consumer that commits in place of a Spark query


@contextlib.asynccontextmanager
async def running_bridge(config: BridgeConfig) -> AsyncIterator[Bridge]:
    """The bridge without its Spark query; a stand-in ack consumer commits what is complete every 50 ms."""
    bridge = Bridge(config)
    await bridge.start(run_query=False)
    assert bridge.positions is not None and bridge.ingest is not None
    bridge.positions.register(STAND_IN, acks=True)

    async def commit_forever() -> None:
        while True:
            bridge.positions.on_committed(STAND_IN, bridge.ingest.complete_offsets())
            await asyncio.sleep(0.05)

    committer = asyncio.ensure_future(commit_forever())
    try:
        yield bridge
    finally:
        committer.cancel()
        await bridge.stop()


async def produce(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict, str, bytes]:
    """Run ``aqueduct-produce --json --quiet``; return (exit code, summary, stderr, its command line as ps sees it)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aqueduct.connector.producer.cli", *args, "--json", "--quiet",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, **(env or {})},
    )  # fmt: skip
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    code, out, err = await finish(proc, TIMEOUT)
    return code, json.loads(out), err, cmdline


async def test_two_programs_feed_one_bridge_side_by_side(tmp_path: Path) -> None:
    async with running_bridge(BridgeConfig(tmp_path / "log", tcp=("127.0.0.1", 0))) as bridge:
        assert bridge.tcp_address is not None
        url = f"tcp://127.0.0.1:{bridge.tcp_address[1]}"
        runs = await asyncio.gather(*(
            produce(url, "--program", program, "--instance", "host-1", "--count", "300", "--streams", "2")
            for program in ("orders", "clicks")
        ))  # fmt: skip
        for code, summary, err, _ in runs:
            assert code == 0, err
            assert summary["sent"] == summary["acked"] == 600 and summary["refused"] is None
        assert bridge.log is not None
        expected = {
            derived_stream_id(program, "host-1", f"produce/{i}"): f"{program}/host-1"
            for program in ("orders", "clicks") for i in range(2)
        }  # fmt: skip
        assert {sid: bridge.log.connector_of(sid) for sid in bridge.log.stream_ids()} == expected
        assert all(bridge.log.durable_end(sid) == 300 for sid in expected)
        assert {int(sid) for _, summary, _, _ in runs for sid in summary["streams"]} == set(expected)

        # Ids chosen by hand that another connector owns: refused, and the summary says so.
        code, summary, err, _ = await produce(url, "--program", "third", "--first-stream-id",
                                              str(next(iter(expected))), "--count", "5")  # fmt: skip
    assert code == 1
    assert summary["refused"] is not None and "belongs to connector" in summary["refused"]
    assert summary["acked"] == 0
    assert "refused" in err


async def test_the_cookie_comes_from_the_environment_or_a_file_never_the_command_line(tmp_path: Path) -> None:
    secret = "s3cret-cookie-value"
    config = BridgeConfig(tmp_path / "log", tcp=("127.0.0.1", 0), cookie=secret.encode())
    async with running_bridge(config) as bridge:
        assert bridge.tcp_address is not None
        url = f"tcp://127.0.0.1:{bridge.tcp_address[1]}"
        code, summary, err, cmdline = await produce(url, "--program", "env", "--count", "20",
                                                    env={"AQUEDUCT_COOKIE": secret})  # fmt: skip
        assert code == 0 and summary["acked"] == 20, err
        assert secret.encode() not in cmdline

        cookie_file = tmp_path / "cookie"
        cookie_file.write_text(secret + "\n")
        code, summary, err, cmdline = await produce(url, "--program", "file", "--count", "20",
                                                    "--cookie-file", str(cookie_file))  # fmt: skip
        assert code == 0 and summary["acked"] == 20, err
        assert secret.encode() not in cmdline

        cookie_file.write_text("wrong\n")
        code, summary, _, _ = await produce(url, "--program", "wrong", "--count", "20", "--cookie-file",
                                            str(cookie_file))  # fmt: skip
    assert code == 1 and summary["refused"] == "bad cookie"


@pytest.fixture
def other_ca(tmp_path: Path) -> CertPaths:
    """Certificates from a CA the bridge does not trust."""
    return generate_certs(tmp_path / "other")


async def test_a_bridge_with_a_client_ca_admits_only_producers_holding_its_certificate(
    tmp_path: Path, certs: CertPaths, other_ca: CertPaths
) -> None:
    config = BridgeConfig(
        tmp_path / "log", quic=("127.0.0.1", 0), certfile=certs.server_cert, keyfile=certs.server_key,
        client_cafile=certs.ca,
    )  # fmt: skip
    async with running_bridge(config) as bridge:
        assert bridge.quic_address is not None and bridge.log is not None
        url = f"aqueduct://127.0.0.1:{bridge.quic_address[1]}"
        common = (url, "--cafile", str(certs.ca), "--count", "20", "--connect-timeout", "3")
        code, summary, err, _ = await produce(*common, "--program", "anonymous")
        assert code == 1 and summary["connections"] == 0, err
        # A missing client certificate is a TLS alert: refused at once, with the reason.
        assert "the server refused the client: it presented no certificate (mutual TLS requires one)" in (
            summary["errors"][0]
        ), summary["errors"]
        code, summary, err, _ = await produce(*common, "--program", "stranger", "--cert",
                                              str(other_ca.client_cert), "--key", str(other_ca.client_key))  # fmt: skip
        assert code == 1 and summary["connections"] == 0, err
        assert bridge.log.stream_ids() == []  # neither got a record in

        code, summary, err, _ = await produce(*common, "--program", "member", "--cert", str(certs.client_cert),
                                              "--key", str(certs.client_key))  # fmt: skip
        assert code == 0, err
        assert summary["acked"] == 20 and summary["errors"] == []
        assert [bridge.log.connector_of(s) for s in bridge.log.stream_ids()] == [f"member/{socket.gethostname()}"]
