"""``aqueduct-bridge serve`` as an operator runs it: cookie from a file, mutual TLS, an honest idle status.

One real bridge process (its own Spark driver) with ``--client-ca`` and
``--cookie-file``; real ``aqueduct-produce`` processes: one without a
certificate is kept out, one with the certificate and the cookie from its
environment gets every record acked after Spark committed it. No secret
is on any command line, and once idle, ``status`` and ``consumers list``
agree that nothing is behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from aqueduct.bridge.storage.commits import read_committed
from aqueduct.bridge.storage.view import load_streams
from aqueduct.runtime.certs import CertPaths
from tests.waiting import finish, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TIMEOUT = 180.0  # only there to turn a hang into a failure
SECRET = "cookie-from-a-file-7f3a"


def script(name: str) -> list[str]:
    path = Path(sys.executable).with_name(name)
    modules = {"aqueduct-bridge": "aqueduct.bridge.app.cli", "aqueduct-produce": "aqueduct.connector.producer.cli"}
    return [str(path)] if path.exists() else [sys.executable, "-m", modules[name]]


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_for_line(path: Path, text: str, proc: asyncio.subprocess.Process) -> None:
    for _ in range(int(TIMEOUT / 0.2)):
        if text in path.read_text():
            return
        assert proc.returncode is None, path.read_text()[-3000:]
        await asyncio.sleep(0.2)
    raise AssertionError(f"no {text!r} in {path}: {path.read_text()[-3000:]}")


async def produce(*args: str, env: dict[str, str]) -> tuple[int, dict, str]:
    proc = await asyncio.create_subprocess_exec(
        *script("aqueduct-produce"), *args, "--json", "--quiet",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    code, out, err = await finish(proc, TIMEOUT)
    return code, json.loads(out), err


async def test_a_bridge_with_a_client_ca_and_a_cookie_file(tmp_path: Path, certs: CertPaths) -> None:
    cookie_file = tmp_path / "cookie"
    cookie_file.write_text(SECRET + "\n")
    cookie_file.chmod(0o600)
    port = free_udp_port()
    env = {k: v for k, v in os.environ.items() if k != "AQUEDUCT_COOKIE"} | {"PYSPARK_PYTHON": sys.executable}
    stderr = tmp_path / "bridge.log"
    with open(stderr, "wb") as sink:
        bridge = await asyncio.create_subprocess_exec(
            *script("aqueduct-bridge"), "serve", "--quic", f"127.0.0.1:{port}", "--log", str(tmp_path / "log"),
            "--output", str(tmp_path / "out"), "--master", "local[1]", "--trigger-interval", "0.5",
            "--status-interval", "1", "--cert", str(certs.server_cert), "--key", str(certs.server_key),
            "--client-ca", str(certs.ca), "--cookie-file", str(cookie_file),
            stdout=sink, stderr=sink, env=env,
        )  # fmt: skip
    try:
        await wait_for_line(stderr, "listening on QUIC", bridge)
        assert SECRET.encode() not in Path(f"/proc/{bridge.pid}/cmdline").read_bytes()
        url = f"aqueduct://127.0.0.1:{port}"
        common = (url, "--cafile", str(certs.ca), "--count", "500", "--streams", "2")

        code, summary, err = await produce(*common, "--program", "no-cert", "--connect-timeout", "3",
                                           env=env | {"AQUEDUCT_COOKIE": SECRET})  # fmt: skip
        assert code == 1 and summary["connections"] == 0, err

        code, summary, err = await produce(*common, "--program", "member", "--cert", str(certs.client_cert),
                                           "--key", str(certs.client_key), "--ack-timeout", str(TIMEOUT),
                                           env=env | {"AQUEDUCT_COOKIE": SECRET})  # fmt: skip
        assert code == 0, err
        assert summary["sent"] == summary["acked"] == 1000 and summary["errors"] == []

        # Idle now, everything acked: no table may show lag or a growing "oldest unread" age once
        # a trigger with nothing to read ran (it writes the commit file of the batch before it).
        log = tmp_path / "log"
        await wait_until(lambda: read_committed(log) == {sid: s.complete for sid, s in load_streams(log).items()},
                         "an idle trigger after the last batch", TIMEOUT)  # fmt: skip
        status = json.loads(subprocess.run([*script("aqueduct-bridge"), "status", "--log", str(tmp_path / "log"),
                                            "--json"], capture_output=True, text=True, timeout=60, check=True).stdout)  # fmt: skip
        assert status["total_lag"] == 0
        assert [(c["name"], c["lag_records"], c["oldest_unread_age_s"]) for c in status["consumers"]] == [
            ("default", 0, None)
        ]
    finally:
        if bridge.returncode is None:
            bridge.send_signal(signal.SIGTERM)
            await asyncio.wait_for(bridge.wait(), TIMEOUT)
    assert bridge.returncode == 0, stderr.read_text()[-3000:]
