"""``SparkBridge`` refuses what ``aqueduct-bridge serve`` refuses, in the same words, before anything exists.

Its refusals come before it touches the Spark session (or any file), so
these tests need no session: they hand it none, and check that no log
directory was made. The ones that need Spark (the source's options, the
workers' interpreter) are in ``tests/spark/test_spark_bridge_mistakes.py``.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from aqueduct.bridge import SparkBridge
from aqueduct.bridge.storage.log import DurableLog

NO_SESSION = None  # never reached: every refusal here comes first


@pytest.fixture(autouse=True)
def python_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bridge that gets past its checks sets ``PYSPARK_PYTHON``; this test process keeps its own."""
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)


def refused(tmp_path: Path, error: str, **settings) -> None:
    """``SparkBridge(**settings)`` raises ``ValueError(error)`` exactly, and leaves no log directory."""
    with pytest.raises(ValueError) as caught:
        SparkBridge(NO_SESSION, tmp_path / "log", **settings)
    assert str(caught.value) == error
    assert not (tmp_path / "log").exists()


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({}, "give quic=, tcp= and/or wallaroo_tcp= HOST:PORT"),
        ({"tcp": "27002"}, "tcp= '27002' is a port alone: give HOST:PORT, e.g. 0.0.0.0:27002 (every interface) "
                           "or 127.0.0.1:27002 (this machine only)"),
        ({"tcp": "nowhere"}, "tcp= expected HOST:PORT, got 'nowhere'"),
        ({"quic": "127.0.0.1:0", "certfile": "c.pem"}, "certfile= and keyfile= go together"),
        ({"quic": "127.0.0.1:0", "tcp_tls": True}, "tcp_tls=True needs tcp= HOST:PORT"),
        ({"tcp": "127.0.0.1:0", "client_cafile": "ca.pem"},
         "client_cafile= needs quic= or tcp= with tcp_tls=True: mutual TLS needs a TLS listener"),
        ({"quic": "127.0.0.1:0", "tcp": "127.0.0.1:0", "client_cafile": "ca.pem"},
         "client_cafile= admits only connectors with a certificate, but tcp= has no TLS and would admit anyone: "
         "add tcp_tls=True, or run it on another bridge"),
        ({"quic": "127.0.0.1:0", "client_cafile": "MISSING.pem"}, "client_cafile= MISSING.pem: no such file"),
        ({"tcp": "127.0.0.1:0", "token_key": "MISSING.pub"},
         "token_key: cannot read MISSING.pub: No such file or directory"),
        ({"tcp": "127.0.0.1:0", "acl": "MISSING.acl"}, "acl: cannot read MISSING.acl: No such file or directory"),
        ({"tcp": "127.0.0.1:0", "token_revoked": "MISSING"},
         "token_revoked= needs token_key= or acl= (it revokes tokens or certificates)"),
    ],
)  # fmt: skip
def test_what_serve_refuses_is_refused_in_the_same_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: dict, error: str
) -> None:
    monkeypatch.chdir(tmp_path)  # relative file names, as a user's script would give them
    refused(tmp_path, f"SparkBridge: {error}", **settings)


@pytest.mark.parametrize(
    ("setting", "text", "error"),
    [
        ("token_key", "not a key\n", "token_key: afile:1: no PEM public key (-----BEGIN PUBLIC KEY-----) found"),
        ("acl", "allow CN=x streams=*\n", "acl: afile:1: missing programs="),
        ("token_revoked", "tokn x\n", "token_revoked: afile:1: expected `token ID`"),
    ],
)
def test_a_credential_file_it_cannot_use_is_refused_naming_the_keyword(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str, text: str, error: str
) -> None:
    """The messages come from the files' parser, shared with ``serve``: here they name ``SparkBridge``'s keyword."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text(text)
    (tmp_path / "empty.acl").write_text("# nobody yet\n")
    others = {"acl": "empty.acl"} if setting == "token_revoked" else {}
    with pytest.raises(ValueError) as caught:
        SparkBridge(NO_SESSION, tmp_path / "log", tcp="127.0.0.1:0", **{setting: "afile"}, **others)
    assert str(caught.value).startswith(f"SparkBridge: {error}") and "\n" not in str(caught.value)
    assert not (tmp_path / "log").exists()


@pytest.mark.parametrize("value", [0, -1.5, float("nan"), float("inf"), "30", True])
def test_a_stalled_after_that_is_no_positive_number_of_seconds_is_refused(tmp_path: Path, value: object) -> None:
    """``serve --stalled-after`` takes a positive number; so does ``SparkBridge(stalled_after=)``."""
    refused(tmp_path, f"SparkBridge: stalled_after= must be a positive number of seconds, got {value!r}",
            tcp="127.0.0.1:0", stalled_after=value)  # fmt: skip


def test_a_key_of_another_certificate_is_refused(tmp_path: Path, certs) -> None:
    refused(
        tmp_path,
        f"SparkBridge: keyfile= {certs.client_key} does not match certfile= {certs.server_cert}: "
        "the certificate is for another key",
        quic="127.0.0.1:0", certfile=certs.server_cert, keyfile=certs.client_key,
    )  # fmt: skip


def test_a_log_another_process_writes_is_refused_naming_it(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log"):
        before = sorted(p.name for p in (tmp_path / "log").iterdir())
        with pytest.raises(ValueError) as caught:
            SparkBridge(NO_SESSION, tmp_path / "log", tcp="127.0.0.1:0")
        assert sorted(p.name for p in (tmp_path / "log").iterdir()) == before
    assert str(caught.value) == (
        f"SparkBridge: log= {tmp_path / 'log'}: held by process {os.getpid()}, its one writer; "
        "stop that one first, or give another log directory"
    )


@pytest.mark.parametrize("field", ["tcp", "metrics"])
def test_a_busy_port_is_refused_at_start_before_the_log_is_created(tmp_path: Path, field: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:  # listening, as another bridge would be
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        settings = {"tcp": address} if field == "tcp" else {"tcp": "127.0.0.1:0", "metrics": address}
        bridge = SparkBridge(NO_SESSION, tmp_path / "log", **settings)
        with pytest.raises(ValueError) as caught:
            bridge.start()
    assert str(caught.value) == f"SparkBridge: {field}= {address}: cannot listen there (TCP): Address already in use"
    assert not (tmp_path / "log").exists()
