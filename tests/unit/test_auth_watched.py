"""The ACL and revocation files re-read when they change, a bad edit kept out and reported once.

Real files in a temporary directory; each change is written the way the
docs ask (a finished copy renamed over the file), so its inode changes and
the check cannot depend on the file system's timestamp resolution.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from aqueduct.auth import AuthFileError, parse_acl, parse_revocations
from aqueduct.auth.watched import WatchedFile


def replace(path: Path, text: str) -> None:
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_change_takes_effect_on_the_next_use(tmp_path):
    path = tmp_path / "revoked"
    path.write_text("token a\n")
    watched = WatchedFile(path, parse_revocations)
    first = watched.current()
    assert watched.current() is first  # unchanged: not parsed again
    replace(path, "token a\nsubject orders\n")
    assert watched.current().revokes(None, "orders") == "subject revoked"


def test_an_edit_in_place_is_seen_too(tmp_path):
    path = tmp_path / "revoked"
    path.write_text("token a\n")
    watched = WatchedFile(path, parse_revocations)
    watched.current()
    with path.open("a") as f:
        f.write("token b\n")  # the size changes
    assert watched.current().token_ids == {"a", "b"}


def test_a_bad_edit_keeps_the_last_good_version_and_is_reported_once(tmp_path, caplog):
    path = tmp_path / "acl"
    path.write_text("allow CN=a programs=* streams=*\n")
    watched = WatchedFile(path, parse_acl)
    good = watched.current()
    replace(path, "allow CN=a programs=* streams=*\nallow CN=b streams=*\n")
    with caplog.at_level(logging.INFO, logger="aqueduct.auth.watched"):
        for _ in range(3):
            assert watched.current() is good
    assert errors(caplog) == [
        f"{path}:2: missing programs=; the previous version stays in force until the file is fixed"
    ]
    assert watched.problem == f"{path}:2: missing programs="
    replace(path, "allow CN=b programs=* streams=*\n")
    assert watched.current().identity_for("CN=b").subject == "CN=b"
    assert watched.problem is None


def test_a_file_gone_keeps_the_last_good_version_until_it_is_back(tmp_path, caplog):
    path = tmp_path / "revoked"
    path.write_text("token a\n")
    watched = WatchedFile(path, parse_revocations)
    path.unlink()
    with caplog.at_level(logging.ERROR, logger="aqueduct.auth.watched"):
        assert watched.current().token_ids == {"a"}
        assert watched.current().token_ids == {"a"}
    assert len(errors(caplog)) == 1 and "No such file" in watched.problem
    path.write_text("token c\n")
    assert watched.current().token_ids == {"c"} and watched.problem is None


def test_a_file_that_is_not_text_is_reported(tmp_path):
    path = tmp_path / "revoked"
    path.write_text("token a\n")
    watched = WatchedFile(path, parse_revocations)
    path.write_bytes(b"token \xff\xfe\n")
    assert watched.current().token_ids == {"a"} and watched.problem == f"{path}: not UTF-8 text"


def test_a_bad_file_at_start_is_raised_not_kept(tmp_path):
    path = tmp_path / "acl"
    path.write_text("allow\n")
    with pytest.raises(AuthFileError, match=r"acl:1: "):
        WatchedFile(path, parse_acl)
    with pytest.raises(FileNotFoundError):
        WatchedFile(tmp_path / "missing", parse_acl)
