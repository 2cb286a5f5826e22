"""A flipped bit anywhere in the stored bytes is reported where it is, never returned as data.

A real log on disk (several streams, several batches and segments each);
for each of a seeded set of positions, one bit is flipped in place, the
log is read as the Spark source reads it (``read_partition`` over every
stream, the very code Spark's workers run) and reopened as a restarted
bridge opens it (the log, then its ingest: the points OK would give), then
the byte is restored. Positions cover every batch's bytes, every
index, and the commit file.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest

from aqueduct.bridge.ingest.service import Ingest
from aqueduct.bridge.source.datasource import (
    SPARK_STRUCT,
    AqueductDataLoss,
    AqueductDataSource,
    AqueductPartition,
    read_partition,
)
from aqueduct.bridge.source.log_access import LocalLog
from aqueduct.bridge.source.planning import Slice
from aqueduct.bridge.storage.commits import commit_file, read_committed
from aqueduct.bridge.storage.corruption import CORRUPT_DIR, corrupt_ranges
from aqueduct.bridge.storage.index import MAGIC, IndexCorrupt, read_entries
from aqueduct.bridge.storage.log import DurableLog, LogError
from aqueduct.bridge.storage.segment import segment_name
from aqueduct.bridge.storage.view import load_streams
from aqueduct.connector.frames import ConnectorMessage
from aqueduct.connector.inbound import DurableStream
from tests.reliability.faults import Figures

STREAMS, BATCHES, PER_BATCH = (3, 4), 6, 25
REOPEN_EVERY = 6  # of the batch flips, every sixth also reopens the bridge


def build(path: Path) -> None:
    with DurableLog(path, segment_bytes=4096) as log:  # a few batches per segment
        for sid in STREAMS:
            log.open_stream(sid, f"s{sid}", "c/1").result()
        for b in range(BATCHES):
            for sid in STREAMS:
                for i in range(PER_BATCH):
                    m = b * PER_BATCH + i
                    log.append(ConnectorMessage.build(sid, f"stream {sid} message {m}".encode(), message_id=m, key=b"k"))
            log.commit()


def read_all(path: Path, skip_corrupt: bool = False) -> dict[int, list[tuple[int, bytes]]]:
    """Every stream's (message id, payload) rows as the source returns them."""
    rows: dict[int, list[tuple[int, bytes]]] = {}
    for sid, s in load_streams(path).items():
        part = AqueductPartition((Slice(str(s.directory), sid, s.earliest, s.end, tuple(s.entries), 0),))
        for batch in read_partition(part, {None: LocalLog(path)}, skip_corrupt=skip_corrupt):
            d = batch.to_pydict()
            rows.setdefault(sid, []).extend(zip(d["message_id"], d["payload"], strict=True))
    return rows


def reopened(path: Path) -> list[DurableStream]:
    """What the bridge tells the log's connector after reopening it: OK's durable points.

    Opening the log reads (and checks) every batch; the ingest starts on it
    as a restarted bridge's does.
    """
    with DurableLog(path) as log:
        points = Ingest(log).durable_streams("c", "1")
        refused = all(log.is_duplicate(sid, m) for sid in STREAMS for m in range(BATCHES * PER_BATCH))
    assert refused  # every id stays received, a corrupt batch's included: none is taken twice
    return points


def flip(file: Path, at: int, bit: int) -> bytes:
    data = bytearray(file.read_bytes())
    original = bytes(data)
    data[at] ^= 1 << bit
    file.write_bytes(bytes(data))
    return original


def test_a_flipped_bit_in_any_stored_batch_is_reported_never_returned(
    tmp_path: Path, rng: random.Random, figures: Figures
) -> None:
    path = tmp_path / "log"
    build(path)
    truth = read_all(path)
    points = reopened(path)
    targets = []  # (stream, entry) for every batch
    for sid in STREAMS:
        for e in read_entries(path / "streams" / str(sid) / "index")[0]:
            targets.append((sid, e))
    reported = reopens = 0
    for n in range(120):
        sid, e = rng.choice(targets)
        segment = path / "streams" / str(sid) / segment_name(e.segment)
        at, bit = e.position + rng.randrange(e.length), rng.randrange(8)
        original = flip(segment, at, bit)
        try:
            with pytest.raises(AqueductDataLoss) as caught:
                read_all(path)
            assert f"stream {sid} records [{e.first_offset}, {e.end_offset}) are corrupt" in str(caught.value)
            skipped = read_all(path, skip_corrupt=True)
            lost = {(m, p) for m, p in truth[sid]} - set(skipped.get(sid, []))
            assert lost == set(truth[sid][e.first_offset : e.end_offset])  # that batch only, nothing changed
            assert all(skipped[other] == truth[other] for other in STREAMS if other != sid)
            if n % REOPEN_EVERY == 0:  # (an open reads every batch: a sample of the flips is enough)
                shutil.rmtree(path / CORRUPT_DIR)
                assert reopened(path) == points  # the bridge opens the log and resumes its connector as before
                assert corrupt_ranges(path) == [(sid, e.first_offset, e.end_offset)]  # and says which batch
                reopens += 1
            reported += 1
        finally:
            segment.write_bytes(original)
            shutil.rmtree(path / CORRUPT_DIR, ignore_errors=True)
    assert read_all(path) == truth and reopened(path) == points and corrupt_ranges(path) == []
    figures.sent = figures.in_sink = sum(len(v) for v in truth.values())
    figures.faults = {"bit_flips_in_batches": 120}
    figures.extra = {"reported": reported, "bridge_reopened": reopens}


def test_a_flipped_bit_in_an_index_or_a_commit_file_is_reported_or_harmless(
    tmp_path: Path, rng: random.Random, figures: Figures
) -> None:
    path = tmp_path / "log"
    build(path)
    truth = read_all(path)
    outcomes = {"index_corrupt": 0, "last_entry_torn": 0, "commit_file_ignored": 0, "commit_file_unaffected": 0}
    for _ in range(60):
        sid = rng.choice(STREAMS)
        index = path / "streams" / str(sid) / "index"
        size = index.stat().st_size
        at, bit = rng.randrange(size), rng.randrange(8)
        original = flip(index, at, bit)
        try:
            last_entry = at >= size - (size - len(MAGIC)) // BATCHES
            if last_entry:  # indistinguishable from a torn write: readers see one batch fewer
                rows = read_all(path)
                assert rows[sid] == truth[sid][: (BATCHES - 1) * PER_BATCH]
                outcomes["last_entry_torn"] += 1
            else:
                with pytest.raises(IndexCorrupt, match=re.escape(str(index))):
                    read_all(path)
                with pytest.raises(LogError, match=re.escape(f"stream {sid}: {index}")):
                    DurableLog(path)
                outcomes["index_corrupt"] += 1
        finally:
            index.write_bytes(original)
    reader = AqueductDataSource({"log": str(path), "consumer": "q"}).streamReader(SPARK_STRUCT)
    reader.commit({str(sid): PER_BATCH * 2 for sid in STREAMS})
    committed = read_committed(path, "q")
    file = commit_file(path, "q")
    offsets_text = json.dumps(json.loads(file.read_bytes())["offsets"])
    for _ in range(60):
        data = file.read_bytes()
        at, bit = rng.randrange(len(data)), rng.randrange(8)
        original = flip(file, at, bit)
        try:
            got = read_committed(path, "q")
            assert got in (None, committed)  # never offsets nobody committed
            outcomes["commit_file_ignored" if got is None else "commit_file_unaffected"] += 1
        finally:
            file.write_bytes(original)
    assert offsets_text and read_all(path) == truth
    figures.faults = {"bit_flips_in_indexes": 60, "bit_flips_in_commit_file": 60}
    figures.extra = outcomes
