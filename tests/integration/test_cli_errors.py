"""Every console script as a user runs it: bad input is one line and exit 2, never a traceback.

Real processes throughout; the bridge checks (busy ports, ``--log`` naming
a file) run before Spark would start, so none of these start Spark, and
each checks that nothing was left behind.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import aqueduct
from aqueduct.bridge.storage.acked import write_acked
from aqueduct.bridge.storage.consumers import register_consumer
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.frames import ConnectorMessage

TIMEOUT = 120

MODULES = {
    "aqueduct": "aqueduct.cli",
    "aqueduct-bridge": "aqueduct.bridge.app.cli",
    "aqueduct-produce": "aqueduct.connector.producer.cli",
}


def command(name: str) -> list[str]:
    """The installed console script, else the module behind it."""
    script = Path(sys.executable).with_name(name)
    return [str(script)] if script.exists() else [sys.executable, "-m", MODULES[name]]


def run(name: str, *args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command(name), *args], capture_output=True, text=True, timeout=TIMEOUT, **kwargs)


def one_line_error(done: subprocess.CompletedProcess[str], expected: str) -> None:
    """Exit 2 and exactly ``expected`` on stderr: one line, no traceback."""
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [expected], done.stderr


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_command_says_its_version(name: str) -> None:
    done = run(name, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{name} {aqueduct.__version__}"


# ---------------------------------------------------------------- aqueduct-produce


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["http://127.0.0.1:7000"], "bridge URL 'http://127.0.0.1:7000': unknown scheme 'http' (tcp://HOST:PORT, tcps://HOST:PORT or aqueduct://HOST:PORT)"),
        (["127.0.0.1:7000"], "bridge URL '127.0.0.1:7000': no scheme (tcp://HOST:PORT, tcps://HOST:PORT or aqueduct://HOST:PORT)"),
        (["localhost:27000"], "bridge URL 'localhost:27000': no scheme (tcp://HOST:PORT, tcps://HOST:PORT or aqueduct://HOST:PORT)"),
        (["tcp://127.0.0.1"], "bridge URL 'tcp://127.0.0.1': no port (tcp://HOST:PORT, tcps://HOST:PORT or aqueduct://HOST:PORT)"),
        (["tcp://127.0.0.1:70000"], "bridge URL 'tcp://127.0.0.1:70000': port must be an integer 1-65535"),
        (["tcp://127.0.0.1:7000,tcp://127.0.0.1:x"], "bridge URL 2 of 2 'tcp://127.0.0.1:x': port must be an integer 1-65535"),
        (["tcp://127.0.0.1:7000", "--replicas", "2"], "replicas must be 1 to the number of bridges (1 bridge given), got 2"),
        (["tcp://127.0.0.1:7000", "MISSING"], "cannot read MISSING: No such file or directory"),
        (["tcp://127.0.0.1:7000", "--cookie-file", "MISSING"],
         "--cookie-file: cannot read MISSING: No such file or directory"),
        (["aqueduct://127.0.0.1:4433", "--cert", "c.pem"], "--cert and --key go together"),
        (["aqueduct://127.0.0.1:4433", "--cafile", "MISSING"], "--cafile MISSING: no such file"),
        (["aqueduct://127.0.0.1:4433", "--cert", "c.pem", "--key", "c.key", "--quic-backend", "picoquic"],
         "--cert: the picoquic backend cannot present a client certificate; use aioquic"),
    ],
)  # fmt: skip
def test_produce_refuses_bad_input_in_one_line(tmp_path: Path, args: list[str], error: str) -> None:
    one_line_error(run("aqueduct-produce", *args, cwd=tmp_path), f"aqueduct-produce: {error}")


def test_produce_refuses_a_client_certificate_over_tcp(tmp_path: Path, certs) -> None:
    done = run("aqueduct-produce", "tcp://127.0.0.1:7000", "--cert", str(certs.client_cert), "--key",
               str(certs.client_key))  # fmt: skip
    one_line_error(done, "aqueduct-produce: a client certificate needs aqueduct:// or tcps:// (tcp:// has no TLS): "
                         "'tcp://127.0.0.1:7000'")  # fmt: skip


def test_produce_checks_numbers_before_connecting() -> None:
    done = run("aqueduct-produce", "tcp://127.0.0.1:7000", "--count", "-1")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == "aqueduct-produce: error: argument --count: must be a non-negative integer, got -1"


# ---------------------------------------------------------------- aqueduct-bridge serve


@pytest.fixture
def busy_tcp_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture
def busy_udp_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def serve(tmp_path: Path, *args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return run("aqueduct-bridge", "serve", "--log", str(tmp_path / "log"), "--output", str(tmp_path / "out"),
               *args, cwd=tmp_path, **kwargs)  # fmt: skip


def nothing_left(tmp_path: Path) -> None:
    assert sorted(p.name for p in tmp_path.iterdir() if p.name not in {"certs", "afile"}) == []


def test_a_busy_tcp_port_is_refused_before_anything_is_created(tmp_path: Path, busy_tcp_port: int) -> None:
    started = time.monotonic()
    done = serve(tmp_path, "--tcp", f"127.0.0.1:{busy_tcp_port}")
    one_line_error(done, f"aqueduct-bridge serve: --tcp 127.0.0.1:{busy_tcp_port}: cannot listen there "
                         "(TCP): Address already in use")  # fmt: skip
    nothing_left(tmp_path)
    assert time.monotonic() - started < TIMEOUT  # (Spark never started: no JVM, no log directory)


def test_a_busy_quic_port_is_refused_before_anything_is_created(tmp_path: Path, busy_udp_port: int) -> None:
    done = serve(tmp_path, "--quic", f"127.0.0.1:{busy_udp_port}")
    one_line_error(done, f"aqueduct-bridge serve: --quic 127.0.0.1:{busy_udp_port}: cannot listen there "
                         "(UDP): Address already in use")  # fmt: skip
    nothing_left(tmp_path)


def test_a_log_that_names_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a log")
    done = run("aqueduct-bridge", "serve", "--log", str(tmp_path / "afile"), "--tcp", "127.0.0.1:0",
               "--output", str(tmp_path / "out"))  # fmt: skip
    one_line_error(done, f"aqueduct-bridge serve: --log {tmp_path / 'afile'}: exists and is not a directory")
    nothing_left(tmp_path)
    for cmd in (("status",), ("consumers", "list")):
        done = run("aqueduct-bridge", *cmd, "--log", str(tmp_path / "afile"))
        one_line_error(done, f"aqueduct-bridge {cmd[0]}: log path '{tmp_path / 'afile'}' does not exist "
                             "or is not a directory")  # fmt: skip


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--tcp", "127.0.0.1:0", "--cookie-file", "MISSING"],
         "--cookie-file: cannot read MISSING: No such file or directory"),
        (["--tcp", "127.0.0.1:0", "--cert", "MISSING.pem", "--key", "MISSING.key"], "--cert MISSING.pem: no such file"),
        (["--tcp", "127.0.0.1:0", "--client-ca", "ca.pem"],
         "--client-ca needs --quic or --tcp with --tcp-tls: mutual TLS needs a TLS listener"),
        (["--quic", "127.0.0.1:0", "--tcp", "127.0.0.1:0", "--client-ca", "ca.pem"],
         "--client-ca admits only connectors with a certificate, but --tcp has no TLS and would admit anyone: "
         "add --tcp-tls, or run it on another bridge"),
        (["--quic", "127.0.0.1:0", "--wallaroo-tcp", "127.0.0.1:0", "--client-ca", "ca.pem"],
         "--client-ca admits only connectors with a certificate, but --wallaroo-tcp has no TLS and would admit "
         "anyone: run it on another bridge"),
        (["--quic", "127.0.0.1:0", "--tcp-tls"], "--tcp-tls needs --tcp HOST:PORT"),
        (["--tcp", "127.0.0.1:0", "--token-key", "MISSING.pub"],
         "--token-key: cannot read MISSING.pub: No such file or directory"),
        (["--tcp", "127.0.0.1:0", "--token-revoked", "ca.pem"],
         "--token-revoked needs --token-key or --acl (it revokes tokens or certificates)"),
        (["--tcp", "127.0.0.1:0", "--acl", "MISSING.acl"], "--acl: cannot read MISSING.acl: No such file or directory"),
        (["--quic", "127.0.0.1:0", "--client-ca", "MISSING.pem"], "--client-ca MISSING.pem: no such file"),
        (["--tcp", "127.0.0.1:0", "--master", "localhost"],
         "--master 'localhost': not a Spark master URL (local, local[N], local[*], spark://HOST:PORT, yarn, "
         "k8s://URL)"),
        (["--quic", "no-such-host.invalid:4433"], None),
    ],
)  # fmt: skip
def test_serve_refuses_bad_files_and_options_before_starting(tmp_path: Path, args: list[str], error: str | None) -> None:
    done = serve(tmp_path, *args)
    if error is None:  # the resolver's wording varies: only its shape is checked
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.startswith("aqueduct-bridge serve: --quic no-such-host.invalid:4433: cannot resolve")
    else:
        one_line_error(done, f"aqueduct-bridge serve: {error}")
    nothing_left(tmp_path)


@pytest.mark.parametrize(
    ("option", "text", "error"),
    [
        ("--token-key", "not a key\n", "--token-key: afile:1: no PEM public key (-----BEGIN PUBLIC KEY-----) found"),
        ("--acl", "allow CN=x streams=*\n", "--acl: afile:1: missing programs="),
    ],
)
def test_serve_refuses_a_credential_file_it_cannot_use_before_starting(
    tmp_path: Path, option: str, text: str, error: str
) -> None:
    (tmp_path / "afile").write_text(text)
    one_line_error(serve(tmp_path, "--tcp", "127.0.0.1:0", option, "afile"), f"aqueduct-bridge serve: {error}")
    nothing_left(tmp_path)


def test_serve_without_java_says_so_before_starting(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"} | {"PATH": str(tmp_path / "no-bin")}
    done = serve(tmp_path, "--tcp", "127.0.0.1:0", env=env)
    one_line_error(done, "aqueduct-bridge serve: Spark needs Java (17 or newer): no java on PATH and "
                         "JAVA_HOME is not set")  # fmt: skip
    nothing_left(tmp_path)


# ---------------------------------------------------------------- status, consumers


def make_log(log_dir: Path, records: int = 10) -> None:
    with DurableLog(log_dir) as log:
        log.open_stream(1, "orders", "shop/a")
        for i in range(records):
            log.append(ConnectorMessage.build(1, b"x", message_id=i))
        log.append(ConnectorMessage.build(1, message_id=records, boundary=True))
        log.commit()


@pytest.mark.parametrize("cmd", [("status",), ("status", "--json"), ("consumers", "list")])
def test_a_reader_that_closes_the_pipe_early_gets_no_traceback(tmp_path: Path, cmd: tuple[str, ...]) -> None:
    """``aqueduct-bridge status | head``: the reader is gone before the table is written."""
    make_log(tmp_path / "log")
    register_consumer(tmp_path / "log", "default", {}, acks=True)
    read, write = os.pipe()
    os.close(read)  # closed before the command writes a byte: every write fails with EPIPE
    try:
        done = subprocess.run([*command("aqueduct-bridge"), *cmd, "--log", str(tmp_path / "log")],
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)  # fmt: skip
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode == 141  # as `cat` reports it in a pipe (128 + SIGPIPE)


def test_an_idle_bridge_shows_no_consumer_lag_once_everything_is_acked(tmp_path: Path) -> None:
    """The consumer table agrees with the stream table: the commit file trails a batch, acked.json does not."""
    log_dir = tmp_path / "log"
    make_log(log_dir, 10)
    register_consumer(log_dir, "default", {}, acks=True, now=time.time() - 60)
    register_consumer(log_dir, "audit", {}, now=time.time() - 60)
    # The source's commit file says 0 (its last batch is written only when a next one starts);
    # the bridge's listener saw the batch commit and acked everything.
    write_acked(log_dir, {1: 11})

    status = json.loads(run("aqueduct-bridge", "status", "--log", str(log_dir), "--json").stdout)
    assert status["total_lag"] == 0
    consumers = {c["name"]: c for c in status["consumers"]}
    assert consumers["default"]["lag_records"] == 0 and consumers["default"]["oldest_unread_age_s"] is None
    assert consumers["audit"]["lag_records"] == 11  # not an ack consumer: acked.json says nothing of it
    listed = json.loads(run("aqueduct-bridge", "consumers", "list", "--log", str(log_dir), "--json").stdout)
    assert {c["name"]: c["lag_records"] for c in listed} == {"default": 0, "audit": 11}


def test_acks_written_before_a_consumer_registered_say_nothing_of_it(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    make_log(log_dir, 10)
    write_acked(log_dir, {1: 11})
    register_consumer(log_dir, "late", {}, acks=True, now=time.time() + 60)
    listed = json.loads(run("aqueduct-bridge", "consumers", "list", "--log", str(log_dir), "--json").stdout)
    assert listed[0]["lag_records"] == 11


# ---------------------------------------------------------------- aqueduct certs


def test_certs_into_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    one_line_error(run("aqueduct", "certs", str(tmp_path / "afile")),
                   f"aqueduct: certs: {tmp_path / 'afile'}: File exists")  # fmt: skip
