"""A group commit over many streams: one Arrow build for all of them, bounded open files, two syncs.

A reconnect storm's group commits touch thousands of streams with a few
records each (issue 41). The log builds every stream's record batch from
one set of columns (:func:`~aqueduct.bridge.storage.pending.record_batches`),
keeps at most ``max_open_streams`` streams' files open without closing the
ones the next commit needs (:class:`~aqueduct.bridge.storage.open_files.OpenFiles`),
and the first commit after a writer was killed mid-commit cuts every torn
segment tail without an fsync each. What a reader gets must not change.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aqueduct.bridge.storage.pending as pending
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.bridge.storage.open_files import OpenFiles
from aqueduct.bridge.storage.view import load_streams
from aqueduct.connector.frames import ConnectorMessage


def stored(path: Path) -> dict[int, list[dict[str, object]]]:
    """Every stream's stored rows, every column (each batch's checksum checked on the way)."""
    return {sid: [r for b in s.read(s.earliest, s.end) for r in b.to_pylist()] for sid, s in load_streams(path).items()}


@st.composite
def record(draw: st.DrawFn, stream_id: int, message_id: int) -> ConnectorMessage:
    kind = draw(st.sampled_from(["data", "timed", "keyed", "ephemeral", "boundary"]))
    if kind == "boundary":
        return ConnectorMessage.build(stream_id, message_id=message_id, boundary=True)
    return ConnectorMessage.build(
        stream_id,
        draw(st.binary(max_size=40)),
        message_id=None if kind == "ephemeral" else message_id,
        event_time=7 if kind == "timed" else None,
        key=b"k%d" % message_id if kind == "keyed" else None,
    )


@st.composite
def shares(draw: st.DrawFn) -> dict[int, list[ConnectorMessage]]:
    """A few records for each of a few streams (stream ids sparse, one above 2**63)."""
    sids = draw(st.lists(st.sampled_from([0, 3, 7, 40, 2**63 + 5]), min_size=1, max_size=5, unique=True))
    return {sid: [draw(record(sid, m)) for m in range(draw(st.integers(1, 6)))] for sid in sids}


@settings(max_examples=40, deadline=None)
@given(shares(), st.integers(1, 120), st.sampled_from([1, 512]))
def test_streams_built_together_store_what_each_built_alone_stores(
    group: dict[int, list[ConnectorMessage]], together_bytes: int, max_open_streams: int
) -> None:
    """One commit over every stream (its columns built in parts of ``together_bytes``) against a commit per stream."""
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2, pytest.MonkeyPatch.context() as mp:
        mp.setattr(pending, "BUILT_TOGETHER_BYTES", together_bytes)
        together, alone = Path(d1), Path(d2)
        for path in (together, alone):
            with DurableLog(path, max_open_streams=max_open_streams) as log:
                for sid, records in group.items():
                    log.open_stream(sid, f"name-{sid}", f"producer/{sid}").result()
                    for r in records:
                        log.append(r)
                    if path == alone:
                        log.commit()
                log.commit()
        rows = stored(together)
        assert rows == stored(alone)
        for sid, records in group.items():  # and each row is its own stream's
            assert [r["payload"] for r in rows[sid] if not r["boundary"]] == [m.payload for m in records if not m.boundary]
            assert {(r["stream_name"], r["connector"]) for r in rows[sid]} == {(f"name-{sid}", f"producer/{sid}")}


def test_a_commit_over_more_streams_than_stay_open_keeps_those_open_already(tmp_path: Path) -> None:
    """No thrashing: streams beyond the limit open for their write alone; the kept ones stay kept."""
    with DurableLog(tmp_path / "log", max_open_streams=4) as log:
        for sid in range(10):
            log.open_stream(sid, f"s{sid}", "c/1").result()
        files = {sid: log._streams[sid].files for sid in range(10)}
    for f in files.values():
        f.entries.clear()  # the files exist; keep() only opens and closes them
    cache = OpenFiles(4)
    everything = list(files.items())
    is_open = lambda: {sid for sid, f in files.items() if f._index_fd >= 0}  # noqa: E731
    assert cache.keep(everything) == {0, 1, 2, 3} == is_open()
    assert cache.keep(everything) == {0, 1, 2, 3} == is_open()  # not the 4 written last: no reopening
    assert cache.keep([everything[1], everything[9]]) == {1, 9}  # room from the least recently written: 0
    assert is_open() == {1, 2, 3, 9}
    assert cache.keep(everything[5:8]) == {5, 6, 7}  # then 2, 3 and 1 make room
    assert is_open() == {5, 6, 7, 9}
    for f in files.values():
        f.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="syncfs(2) only on Linux")  # found there, or fails
def test_the_first_commit_after_a_killed_commit_cuts_every_torn_tail_without_an_fsync_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log"
    streams = range(40)
    with DurableLog(path, max_open_streams=8) as log:
        for sid in streams:
            log.open_stream(sid, f"s{sid}", "c/1").result()
            log.append(ConnectorMessage.build(sid, b"one", message_id=1))
        log.commit()
    for sid in streams:  # what a writer killed in the middle of a commit leaves: bytes past the last entry
        with open(path / "streams" / str(sid) / "00000000000000000000.arrow", "ab") as f:
            f.write(b"\xff\xff\xff\xff\x40\x01\x00\x00" + os.urandom(100))
    fsyncs = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real(fd)))
    with DurableLog(path, max_open_streams=8) as log:
        for sid in streams:
            log.append(ConnectorMessage.build(sid, b"two", message_id=2))
        assert log.commit() == {sid: 2 for sid in streams}
    assert fsyncs == []  # two syncfs in all, not 40 fsyncs
    assert {sid: [r["payload"] for r in rows] for sid, rows in stored(path).items()} == {
        sid: [b"one", b"two"] for sid in streams
    }
