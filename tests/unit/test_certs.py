"""`aqueduct certs`: a local CA plus server/client certificates that TLS accepts."""

from __future__ import annotations

import ipaddress
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from aioquic.tls import verify_certificate
from cryptography import x509

from aqueduct.cli import main
from aqueduct.runtime.certs import generate_certs


def load(path):
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_generated_server_cert_verifies_for_each_host(tmp_path):
    paths = generate_certs(tmp_path, ["localhost", "127.0.0.1", "example.test"])
    server = load(paths.server_cert)
    for host in ("localhost", "127.0.0.1", "example.test"):
        verify_certificate(server, server_name=host, cafile=str(paths.ca))
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)


def test_server_cert_does_not_verify_for_other_hosts(tmp_path):
    paths = generate_certs(tmp_path, ["localhost"])
    with pytest.raises(Exception, match="doesn't match"):
        verify_certificate(load(paths.server_cert), server_name="other.test", cafile=str(paths.ca))


def test_client_cert_is_signed_by_the_ca(tmp_path):
    paths = generate_certs(tmp_path)
    verify_certificate(load(paths.client_cert), cafile=str(paths.ca))


def test_the_files_the_mutual_tls_example_names_are_made(tmp_path):
    """docs/deployment.md's mutual TLS example: the bridge's --client-ca verifies client.pem."""
    paths = generate_certs(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ca.pem", "client-ca.pem", "client.key", "client.pem", "server.key", "server.pem"
    ]  # fmt: skip
    assert paths.client_ca == tmp_path / "client-ca.pem"
    verify_certificate(load(paths.client_cert), cafile=str(paths.client_ca))


def test_private_keys_are_owner_only(tmp_path):
    paths = generate_certs(tmp_path)
    for key in (paths.server_key, paths.client_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_existing_files_are_not_overwritten_without_force(tmp_path, capsys):
    assert main(["certs", str(tmp_path)]) == 0
    before = (tmp_path / "ca.pem").read_bytes()
    assert main(["certs", str(tmp_path)]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert (tmp_path / "ca.pem").read_bytes() == before
    assert main(["certs", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "ca.pem").read_bytes() != before


def test_cli_json_output_and_days(tmp_path, capsys):
    assert main(["certs", str(tmp_path), "--hosts", "a.test,10.0.0.1", "--days", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["hosts"] == ["a.test", "10.0.0.1"]
    cert = load(tmp_path / "server.pem")
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days == 3
    assert set(out) >= {"ca", "client_ca", "server_cert", "server_key", "client_cert", "client_key"}


def test_cli_rejects_bad_days(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:  # argparse's usage error: one line, exit 2
        main(["certs", str(tmp_path), "--days", "0"])
    assert exited.value.code == 2
    assert "argument --days: must be a positive integer, got 0" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing written


def certs_help() -> str:
    """``python -m aqueduct.cli certs --help`` on a wide terminal (a path in it is not wrapped)."""
    env = {**os.environ, "COLUMNS": "1000"}
    command = [sys.executable, "-m", "aqueduct.cli", "certs", "--help"]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True, env=env).stdout


def test_cli_help_runs_as_a_module():
    out = certs_help()
    assert "--hosts" in out and "--days" in out


def test_cli_help_names_the_production_notes_by_a_path_that_exists():
    guide = Path(certs_help().split("For production see ")[1].split()[0])
    assert guide.is_file() and "## Production" in guide.read_text()
