"""A corrupt stored batch is met alike on every path the source reads by.

The stream reader reads a batch's bytes in two places: an executor's
``read`` of a planned slice, and the planner's epoch questions, which a
per-trigger limit (``maxRecordsPerTrigger``, ``maxBytesPerTrigger``) and a
numeric ``startingOffsets`` ask. Each path is driven here as Spark drives
it (``initialOffset``, ``latestOffset``, ``partitions`` and ``read`` on
readers and partitions pickled across, ``commit``), from the log's
directory and over a bridge's Flight server, over a real log with one
real flipped bit in one real segment. With ``failOnDataLoss=true`` each
stops with the same ``AqueductDataLoss``; with ``false`` each skips that
batch alone, records it in ``LOG/corrupt/`` and counts it in the
consumer's ``skipped_records``, the same count everywhere.
"""

from __future__ import annotations

import json
import pickle
from collections import defaultdict
from pathlib import Path

import pytest

from aqueduct.bridge.source.datasource import (
    SPARK_STRUCT,
    AqueductDataLoss,
    AqueductDataSource,
    AqueductLimitedStreamReader,
    AqueductStreamReader,
)
from aqueduct.bridge.storage.commits import commit_file
from aqueduct.bridge.storage.corruption import corrupt_ranges
from aqueduct.bridge.storage.index import IndexEntry
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.bridge.storage.segment import BatchCorrupt, segment_name
from aqueduct.bridge.storage.view import load_streams
from aqueduct.connector.frames import ConnectorMessage
from tests.corrupting import flip_a_bit_in_stored_batch
from tests.log_locations import LogLocation

EPOCHS = 5  # per stream, one batch each: three records and a BOUNDARY, message ids = offsets
STREAMS = (5, 6)
BAD = (5, 4, 8)  # stream 5's batch 1, records [4, 8), gets the flipped bit

Row = tuple[int, int, bytes]  # stream, message id, payload


def build(path: Path) -> IndexEntry:
    """The log, then one bit flipped in stream 5's second batch; that batch's index entry."""
    with DurableLog(path) as log:
        for sid in STREAMS:
            log.open_stream(sid, f"s{sid}", "c/1", boundaries=True).result()
        for epoch in range(EPOCHS):
            for sid in STREAMS:
                for mid in range(epoch * 4, epoch * 4 + 3):
                    log.append(ConnectorMessage.build(sid, b"payload %d/%d" % (sid, mid), message_id=mid))
                log.append(ConnectorMessage.build(sid, message_id=epoch * 4 + 3, boundary=True))
            log.commit()
    return flip_a_bit_in_stored_batch(path, 5, 1)


def sent(start: int = 0) -> list[Row]:
    """Every data record, stream 5's from ``start`` on."""
    return sorted(
        (sid, mid, b"payload %d/%d" % (sid, mid))
        for sid in STREAMS
        for mid in range(start if sid == 5 else 0, EPOCHS * 4)
        if mid % 4 != 3
    )


def byte_budget(path: Path) -> str:
    """A budget whose per-stream share (half, two streams) ends inside a stream's second batch."""
    return str(3 * load_streams(path)[5].entries[0].length)


#: the paths, as the options that take them; the plain reader never asks an epoch question
PATHS = {
    "plain-read": lambda path: {},
    "maxRecordsPerTrigger": lambda path: {"maxRecordsPerTrigger": "6"},
    "maxBytesPerTrigger": lambda path: {"maxBytesPerTrigger": byte_budget(path)},
    "numeric-startingOffsets": lambda path: {"startingOffsets": '{"5": 4}'},
}


def spark_round_trip(obj):  # noqa: ANN001, ANN201 - whatever crosses into a Spark worker
    return pickle.loads(pickle.dumps(obj))


class Query:
    """A streaming query driven as Spark drives the reader; says what it was doing when it stopped."""

    def __init__(self, path: Path, where: LogLocation, **options: str) -> None:
        source = AqueductDataSource({**where.options(path), **options})
        self.path = path
        self.reader: AqueductStreamReader = spark_round_trip(source.streamReader(SPARK_STRUCT))
        self.doing = ""
        #: the batches ``LOG/corrupt/`` held when the first slice was read: what planning recorded
        self.recorded_by_planning: list[tuple[int, int, int]] | None = None

    def run(self) -> list[list[Row]]:
        """Every micro-batch's rows, until a trigger finds nothing new."""
        r = self.reader
        limited = isinstance(r, AqueductLimitedStreamReader)
        self.doing = "planning"
        start = r.initialOffset()
        batches: list[list[Row]] = []
        for _ in range(len(STREAMS) * EPOCHS + 1):  # bounded: every batch moves at least one epoch
            self.doing = "planning"
            end = r.latestOffset(start, r.getDefaultReadLimit()) if limited else r.latestOffset()
            if end == start:
                return batches
            parts = spark_round_trip(r.partitions(start, end))
            self.doing = "reading"
            if self.recorded_by_planning is None:
                self.recorded_by_planning = corrupt_ranges(self.path)
            executor = spark_round_trip(r)
            rows = [row for p in parts for b in executor.read(p) for row in b.to_pylist()]
            batches.append([(row["stream_id"], row["message_id"], row["payload"]) for row in rows])
            self.doing = "committing"
            r.commit(end)
            start = end
        raise AssertionError("the query never caught up")


@pytest.fixture(params=["log", "bridge"])
def where(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Each path from the log's directory, then over a bridge's Flight server."""
    location = LogLocation(request.param, tmp_path_factory.mktemp("flight"))
    yield location
    location.close()


def the_report(path: Path) -> str:
    """What the storage layer says of the flipped batch: the error every path must give, word for word."""
    with pytest.raises(BatchCorrupt) as caught:
        list(load_streams(path)[5].read(4, 8))
    return f"aqueduct source: {caught.value} (failOnDataLoss=false skips such batches)"


@pytest.mark.parametrize("path_name", list(PATHS))
def test_fail_on_data_loss_stops_every_path_with_the_same_report(
    tmp_path: Path, where: LogLocation, path_name: str
) -> None:
    path = tmp_path / "log"
    bad = build(path)
    report = the_report(path)
    assert f"log {str(path)!r} stream 5 records [4, 8) are corrupt: the batch at byte {bad.position} " \
           f"of segment {segment_name(bad.segment)} fails its CRC32C check" in report  # fmt: skip
    query = Query(path, where, **PATHS[path_name](path))
    with pytest.raises(AqueductDataLoss) as caught:
        query.run()
    assert str(caught.value) == report
    # a limit or a numeric start meets the batch while planning, before any of it is read
    assert query.doing == ("reading" if path_name == "plain-read" else "planning")
    assert corrupt_ranges(path) == [BAD]


@pytest.mark.parametrize("path_name", list(PATHS))
def test_fail_on_data_loss_false_skips_that_batch_alone_records_and_counts_it_on_every_path(
    tmp_path: Path, where: LogLocation, path_name: str
) -> None:
    path = tmp_path / "log"
    build(path)
    query = Query(path, where, failOnDataLoss="false", **PATHS[path_name](path))
    batches = query.run()
    rows = [row for batch in batches for row in batch]
    first = 4 if path_name == "numeric-startingOffsets" else 0
    assert sorted(rows) == [row for row in sent(first) if not (row[0] == 5 and 4 <= row[1] < 8)]
    assert len(rows) == len(set(rows))  # each once
    batches_of_epoch: dict[tuple[int, int], set[int]] = defaultdict(set)
    for i, batch in enumerate(batches):
        for sid, mid, _ in batch:
            batches_of_epoch[(sid, mid // 4)].add(i)
    assert all(len(b) == 1 for b in batches_of_epoch.values()), "an epoch was split across micro-batches"
    assert query.recorded_by_planning == ([] if path_name == "plain-read" else [BAD])
    assert corrupt_ranges(path) == [BAD]
    assert json.loads(commit_file(path, "default").read_text())["skipped_records"] == 4


def test_a_batch_read_with_a_numeric_start_reports_the_batch_while_planning(
    tmp_path: Path, where: LogLocation
) -> None:
    """``spark.read`` has no failOnDataLoss: its partitions are refused with the same report."""
    path = tmp_path / "log"
    build(path)
    source = AqueductDataSource({**where.options(path), "startingOffsets": '{"5": 4}', "endingOffsets": "latest"})
    batch = spark_round_trip(source.reader(SPARK_STRUCT))
    with pytest.raises(AqueductDataLoss) as caught:
        batch.partitions()
    assert str(caught.value) == the_report(path)
    assert corrupt_ranges(path) == [BAD]


def test_a_corrupt_batch_truncated_before_the_query_read_it_counts_once(tmp_path: Path) -> None:
    """Recorded corrupt, then truncated: the skip is the truncation's, counted once, not again as corrupt."""
    path = tmp_path / "log"
    with DurableLog(path, segment_bytes=1) as log:  # a segment per batch: truncation drops whole batches
        log.open_stream(5, "s5", "c/1", boundaries=True).result()
        for epoch in range(3):
            for mid in range(epoch * 4, epoch * 4 + 3):
                log.append(ConnectorMessage.build(5, b"payload 5/%d" % mid, message_id=mid))
            log.append(ConnectorMessage.build(5, message_id=epoch * 4 + 3, boundary=True))
            log.commit()
        flip_a_bit_in_stored_batch(path, 5, 1)
        where = LogLocation("log", tmp_path)
        late = Query(path, where, failOnDataLoss="false")
        start = late.reader.initialOffset()
        assert Query(path, where, failOnDataLoss="false", consumer="early").run()  # records [4, 8)
        assert corrupt_ranges(path) == [BAD]
        assert log.truncate(5, 8).result() == 8  # as if the late consumer's registration had been dropped
        end = late.reader.next_end(start, late.reader.getDefaultReadLimit())
        assert end == {"5": 12}
        late.reader.commit(end)
    assert json.loads(commit_file(path, "default").read_text())["skipped_records"] == 8  # [0, 8) truncated
