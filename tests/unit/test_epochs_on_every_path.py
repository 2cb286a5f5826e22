"""A micro-batch never holds part of an epoch, on every path the source plans by.

The stream reader plans a trigger one of three ways: a full look at every
stream, the caught-up shortcut of the default trigger (no limit, nothing
new but what the log reloaded: only the changed streams are looked at),
and a budget (``maxRecordsPerTrigger``, ``maxBytesPerTrigger``) spent in
whole epochs. Each is driven here as Spark drives it (``initialOffset``,
``getDefaultReadLimit`` and ``latestOffset(start, limit)`` for a reader
with limits, ``latestOffset()`` for the plain one, ``partitions``, ``read``,
``commit``, offsets and partitions pickled across), over real log files
whose streams have open epochs (records after the last BOUNDARY) at
every trigger.
"""

from __future__ import annotations

import pickle
import random
from collections import defaultdict
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from aqueduct.bridge.source.datasource import (
    SPARK_STRUCT,
    AqueductDataSource,
    AqueductLimitedStreamReader,
    AqueductStreamReader,
)
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.frames import ConnectorMessage

STREAMS = 6


def reader(log: DurableLog, **options: str) -> AqueductStreamReader:
    source = AqueductDataSource({"log": str(log.path), **options})
    return pickle.loads(pickle.dumps(source.streamReader(SPARK_STRUCT)))


def read_batch(r: AqueductStreamReader, start: dict, end: dict) -> list[dict]:
    parts = pickle.loads(pickle.dumps(r.partitions(start, end)))
    return [row for p in parts for b in r.read(p) for row in b.to_pylist()]


def assert_epoch_edges(log: DurableLog, end: dict[str, int]) -> None:
    """Every stream's end is the end of a closed epoch: at or below complete, never inside an epoch."""
    for key, offset in end.items():
        sid = int(key)
        view = log.snapshot(sid)
        assert offset <= view.complete, f"stream {sid}: end {offset} reads into the open epoch at {view.complete}"
        if view.earliest < offset < view.end:
            assert view.epoch_at(offset - 1) != view.epoch_at(offset), f"stream {sid}: end {offset} cuts an epoch"


class Producers:
    """Random traffic on boundary streams; remembers every data record and its epoch as sent."""

    def __init__(self, log: DurableLog, rng: random.Random) -> None:
        self.log, self.rng = log, rng
        self.next_id = dict.fromkeys(range(STREAMS), 0)
        self.epoch = dict.fromkeys(range(STREAMS), 0)
        self.sent: dict[tuple[int, int], tuple[bytes, int]] = {}  # (stream, id) -> (payload, epoch number)
        for sid in range(STREAMS):
            log.open_stream(sid, f"s{sid}", "c/1", boundaries=True).result()

    def _next(self, sid: int) -> int:
        mid, self.next_id[sid] = self.next_id[sid], self.next_id[sid] + 1
        return mid

    def burst(self) -> None:
        """Some records on some streams, a BOUNDARY now and then: most streams end with an open epoch."""
        for _ in range(self.rng.randint(1, 12)):
            sid = self.rng.randrange(STREAMS)
            if self.rng.random() < 0.2:
                self.close(sid)
            else:
                mid = self._next(sid)
                payload = b"s%d-m%d-%s" % (sid, mid, self.rng.randbytes(self.rng.randint(0, 6)).hex().encode())
                self.log.append(ConnectorMessage.build(sid, payload, message_id=mid))
                self.sent[(sid, mid)] = (payload, self.epoch[sid])
        self.log.commit()

    def close(self, sid: int) -> None:
        self.log.append(ConnectorMessage.build(sid, message_id=self._next(sid), boundary=True))
        self.epoch[sid] += 1

    def close_all(self) -> None:
        for sid in range(STREAMS):
            self.close(sid)
        self.log.commit()


@pytest.mark.parametrize(
    "options",
    [{}, {"maxRecordsPerTrigger": "7"}, {"maxBytesPerTrigger": "3000"}],
    ids=["default-trigger-unlimited", "default-trigger-max-records", "default-trigger-max-bytes"],
)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_batch_holds_whole_epochs_and_every_record_once(tmp_path: Path, options: dict, seed: int) -> None:
    rng = random.Random(seed)
    with DurableLog(tmp_path / "log", segment_bytes=2048) as log:
        producers = Producers(log, rng)
        r = reader(log, **options)
        limited = isinstance(r, AqueductLimitedStreamReader)
        assert limited == bool(options)  # only a limit makes Spark drive the reader with admission control
        start = r.initialOffset()
        batches: list[list[dict]] = []

        def trigger() -> dict:
            nonlocal start
            # what Spark's default trigger asks: the plain reader knows its start itself
            end = r.latestOffset(start, r.getDefaultReadLimit()) if limited else r.latestOffset()
            assert_epoch_edges(log, end)
            if not limited:  # the shortcut plans what a full look from the same start plans
                assert end == reader(log).next_end(start, ReadAllAvailable())
            if end != start:
                batches.append(read_batch(r, start, end))
                r.commit(end)
            start = end
            return end

        for _ in range(30):
            producers.burst()
            trigger()
        producers.close_all()
        for _ in range(len(producers.sent) + STREAMS):  # bounded drain: every batch moves at least one epoch
            before = start
            if trigger() == before:
                break
    rows = [(row["stream_id"], row["message_id"]) for batch in batches for row in batch]
    assert sorted(rows) == sorted(producers.sent)  # every record once
    got = {(row["stream_id"], row["message_id"]): row["payload"] for batch in batches for row in batch}
    assert got == {k: payload for k, (payload, _) in producers.sent.items()}  # exactly the bytes
    batches_of_epoch: dict[tuple[int, int], set[int]] = defaultdict(set)
    for i, batch in enumerate(batches):
        for row in batch:
            batches_of_epoch[(row["stream_id"], producers.sent[(row["stream_id"], row["message_id"])][1])].add(i)
    assert all(len(b) == 1 for b in batches_of_epoch.values()), "an epoch was split across micro-batches"


def test_a_caught_up_default_trigger_waits_for_the_boundary(tmp_path: Path) -> None:
    """The shortcut's case exactly: caught up, no limit, a stream's open epoch grew since the last trigger."""
    with DurableLog(tmp_path / "log") as log:
        log.open_stream(1, "one", "c/1", boundaries=True).result()
        ids = iter(range(100))

        def append(n: int, *, boundary: bool) -> None:
            for _ in range(n):
                log.append(ConnectorMessage.build(1, b"x", message_id=next(ids)))
            if boundary:
                log.append(ConnectorMessage.build(1, message_id=next(ids), boundary=True))
            log.commit()

        r = reader(log)
        start = r.initialOffset()
        append(3, boundary=True)
        first = r.next_end(start, ReadAllAvailable())  # a full look
        assert first == {"1": 4}
        second = r.next_end(first, ReadAllAvailable())  # caught up: the shortcut from here on
        assert second == first
        append(2, boundary=False)  # an open epoch grows
        assert r.next_end(second, ReadAllAvailable()) == first
        append(1, boundary=True)  # and closes
        assert r.next_end(second, ReadAllAvailable()) == {"1": 8}
