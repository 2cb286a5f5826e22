"""Partitions follow data volume, not stream count; planning rereads only what changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from aqueduct.bridge.source.planning import plan_slices
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.bridge.storage.view import LogSnapshots, load_streams
from aqueduct.connector.frames import ConnectorMessage


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,000 streams of 5 records each, and stream 5000 with 10,000."""
    path = tmp_path_factory.mktemp("many") / "log"
    with DurableLog(path) as log:
        for sid in range(1000):
            log.open_stream(sid, f"s{sid}", "c/1")
            for i in range(5):
                log.append(ConnectorMessage.build(sid, b"p" * 100, message_id=i))
        log.open_stream(5000, "big", "c/1")
        for i in range(10_000):
            log.append(ConnectorMessage.build(5000, b"p" * 100, message_id=i))
        log.commit()
    return path


def ranges(parts) -> list[list[tuple[int, int, int]]]:
    return [[(x.key, x.start, x.end) for x in p] for p in parts]


def test_a_thousand_small_streams_pack_into_one_partition(many: Path) -> None:
    streams = load_streams(many)
    small = {sid: 5 for sid in range(1000)}
    parts = plan_slices(streams, {}, small)
    assert len(parts) == 1 and sum(x.end - x.start for x in parts[0]) == 5000
    assert ranges(parts) == ranges(plan_slices(streams, {}, small))  # deterministic


def test_a_big_range_is_split_and_targets_bound_every_partition(many: Path) -> None:
    streams = load_streams(many)
    ends = {sid: 5 for sid in range(1000)} | {5000: 10_000}
    parts = plan_slices(streams, {5000: 1000}, ends, max_records=2000)
    assert all(sum(x.end - x.start for x in p) <= 2000 for p in parts)
    big = sorted((x.start, x.end) for p in parts for x in p if x.key == 5000)
    assert big[0][0] == 1000 and big[-1][1] == 10_000  # contiguous cover of [1000, 10000)
    assert all(a[1] == b[0] for a, b in zip(big, big[1:], strict=False))
    by_bytes = plan_slices(streams, {}, {5000: 10_000}, max_bytes=200_000)
    assert len(by_bytes) >= 5 and all(sum(x.bytes for x in p) <= 200_000 for p in by_bytes)


def test_min_partitions_spreads_a_small_batch(many: Path) -> None:
    streams = load_streams(many)
    parts = plan_slices(streams, {}, {sid: 5 for sid in range(1000)}, min_partitions=8)
    assert len(parts) >= 8
    covered = sorted((x.key, x.start, x.end) for p in parts for x in p)
    assert covered == [(sid, 0, 5) for sid in range(1000)]


def test_snapshots_reread_only_the_streams_that_changed(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log", segment_bytes=1) as log:
        for sid in (1, 2):
            log.open_stream(sid, f"s{sid}", "c/1")
            log.append(ConnectorMessage.build(sid, b"x", message_id=0))
        log.commit()
        snapshots = LogSnapshots(tmp_path / "log")
        first = snapshots.load()
        log.append(ConnectorMessage.build(2, b"y", message_id=1))
        log.commit()
        second = snapshots.load()
        assert second[1] is first[1]  # untouched: not read again
        assert second[2].end == 2 and second[2] is not first[2]
        assert log.truncate(2, 1).result() == 1  # the index is replaced whole
        assert snapshots.load()[2].earliest == 1
        log.open_stream(3, "s3", "c/1").result()
        assert sorted(snapshots.load()) == [1, 2, 3]


def test_a_caught_up_reader_plans_what_a_fresh_one_plans(tmp_path: Path) -> None:
    """The per-trigger shortcut (only changed streams looked at) never differs from a full look."""
    import random

    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from aqueduct.bridge.source.datasource import SPARK_STRUCT, AqueductDataSource

    rng = random.Random(7)
    with DurableLog(tmp_path / "log", segment_bytes=1) as log:
        ids: dict[int, int] = {}

        def reader():
            return AqueductDataSource({"log": str(log.path)}).streamReader(SPARK_STRUCT)

        steady = reader()
        end = steady.initialOffset()
        for round_ in range(25):
            for _ in range(rng.randint(0, 4)):
                sid = rng.randint(0, 40)
                if sid not in ids:
                    log.open_stream(sid, f"s{sid}", "c/1").result()
                    ids[sid] = 0
                log.append(ConnectorMessage.build(sid, b"x", message_id=ids[sid]))
                ids[sid] += 1
            log.commit()
            if round_ % 3 == 2:  # now and then a limited trigger: the next full one must not trust it
                end = steady.next_end(end, ReadMaxRows(2))
                continue
            nxt = steady.next_end(end, ReadAllAvailable())
            assert nxt == reader().next_end(end, ReadAllAvailable())
            rows = [(x.key, x.start, x.end) for p in steady.partitions(end, nxt) for x in p.slices]
            assert rows == [(x.key, x.start, x.end) for p in reader().partitions(end, nxt) for x in p.slices]
            end = nxt
        assert end == {str(sid): n for sid, n in sorted(ids.items())}
