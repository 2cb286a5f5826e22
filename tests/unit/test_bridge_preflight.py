"""``serve``'s checks before anything is created: directories and listen addresses, on real files and sockets."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from aqueduct.bridge.app.preflight import PreflightError, check_new_directory, check_port_free


def test_a_directory_to_be_created_needs_a_directory_above_it(tmp_path: Path) -> None:
    check_new_directory(tmp_path / "new" / "deeper", "--log")  # created later, parents included
    check_new_directory(tmp_path, "--log")  # exists
    (tmp_path / "file").write_text("")
    with pytest.raises(PreflightError, match=r"^--log .*/file: exists and is not a directory$"):
        check_new_directory(tmp_path / "file", "--log")
    with pytest.raises(PreflightError, match=r"^--output .*/file/out: .*/file is not a directory$"):
        check_new_directory(tmp_path / "file" / "out", "--output")
    assert not (tmp_path / "new").exists()  # only looked


@pytest.mark.parametrize("uri", ["hdfs:///events", "s3a://bucket/events", "file:/tmp/x", "abfss://c@a.dfs/x"])
def test_a_filesystem_uri_is_sparks_to_open(uri: str) -> None:
    check_new_directory(Path(uri), "--output")


def test_a_port_in_use_is_named_and_port_zero_is_always_free() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(PreflightError, match=rf"^--tcp 127\.0\.0\.1:{port}: cannot listen there \(TCP\): "):
            check_port_free("--tcp", "127.0.0.1", port, udp=False)
        check_port_free("--tcp", "127.0.0.1", 0, udp=False)
