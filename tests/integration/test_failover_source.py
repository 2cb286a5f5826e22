"""The failover reader on real logs (written by the real DurableLog), driven as Spark drives it, without a JVM.

Two logs hold overlapping copies of the same streams, as a producer that
moved from one bridge to the other leaves them (the second copy starts at
the point the producer was acked up to, and has everything it resent).
Spark's calls are made the way Spark makes them: offsets through JSON,
partitions and the reader pickled into workers.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

from aqueduct.bridge.source.clock import REMOTE_IDLE_POLL
from aqueduct.bridge.source.datasource import (
    SPARK_STRUCT,
    AqueductDataLoss,
    AqueductDataSource,
    AqueductOptionError,
)
from aqueduct.bridge.source.failover import FailoverStreamReader
from aqueduct.bridge.storage.commits import read_committed
from aqueduct.bridge.storage.consumers import load_consumers
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.bridge.storage.view import load_stream
from aqueduct.connector.frames import ConnectorMessage
from tests.log_locations import FlightLogs
from tests.unit.test_log_source_options import ManualClock

BOUNDED, PER_RECORD = 7, 8  # a stream with BOUNDARY records (every 4th id), one whose every record is an epoch


def write(path: Path, ids: range, start: int = 0) -> None:
    """The producer's records ``ids`` of both streams, one group commit each, into the log at ``path``."""
    log = DurableLog(path)
    log.open_stream(BOUNDED, "bounded", "c/1", boundaries=True, point_of_reference=start).result()
    log.open_stream(PER_RECORD, "per-record", "c/1", point_of_reference=start).result()
    for i in ids:
        if i % 4 == 3:
            log.append(ConnectorMessage.build(BOUNDED, message_id=i, boundary=True))
        else:
            log.append(ConnectorMessage.build(BOUNDED, b"b%d" % i, message_id=i))
        log.append(ConnectorMessage.build(PER_RECORD, b"p%d" % i, message_id=i))
        log.commit()
    log.close()


def through_spark(obj):
    return pickle.loads(pickle.dumps(obj))


def reader(**options: str) -> FailoverStreamReader:
    return through_spark(AqueductDataSource({"failover": "true", **options}).streamReader(SPARK_STRUCT))


def batch(r: FailoverStreamReader, start: dict) -> tuple[dict, list[tuple[int, int, bytes]]]:
    """One micro-batch from ``start``: its end and its rows as (stream, id, payload)."""
    end = json.loads(json.dumps(r.latestOffset()))
    parts = through_spark(r.partitions(start, end))
    rows = [(x["stream_id"], x["message_id"], x["payload"]) for p in parts for b in r.read(p) for x in b.to_pylist()]
    r.commit(end)
    return end, rows


def expected(ids: range) -> list[tuple[int, int, bytes]]:
    bounded = [(BOUNDED, i, b"b%d" % i) for i in ids if i % 4 != 3]
    return bounded + [(PER_RECORD, i, b"p%d" % i) for i in ids]


@pytest.fixture
def logs(tmp_path: Path) -> tuple[Path, Path]:
    """Log a: ids 0..11; log b, the producer moved there acked up to 8: ids 8..19."""
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, range(0, 12))
    write(b, range(8, 20), start=8)
    return a, b


def acked_point(log: Path, sid: int) -> int:
    """The point of reference the bridge acks from the query's commit file."""
    s = load_stream(log, sid)
    assert s is not None
    return s.reference_at(read_committed(log, "default")[sid])


def test_each_record_once_across_copies_and_every_bridge_told_the_commit(logs: tuple[Path, Path]) -> None:
    a, b = logs
    r = reader(log=f"a={a},b={b}")
    start = r.initialOffset()
    assert start == {"by_id": {str(BOUNDED): -1, str(PER_RECORD): -1}}
    assert set(load_consumers(a)) == set(load_consumers(b)) == {"default"}
    end, rows = batch(r, start)
    assert sorted(rows) == sorted(expected(range(0, 20)))
    assert end == {"by_id": {str(BOUNDED): 20, str(PER_RECORD): 20}}
    for log in (a, b):  # both bridges ack their producers up to the committed point
        assert acked_point(log, PER_RECORD) == 20 if log == b else acked_point(log, PER_RECORD) == 12
    assert acked_point(b, BOUNDED) == 20


def epochs_read(*logs: str) -> list[tuple[int, int, int]]:
    """Every record of both streams as (stream, id, epoch), the copies preferred in the order given."""
    r = reader(log=",".join(logs))
    start = r.initialOffset()
    end = json.loads(json.dumps(r.latestOffset()))
    parts = through_spark(r.partitions(start, end))
    return sorted((x["stream_id"], x["message_id"], x["epoch"]) for p in parts for b in r.read(p) for x in b.to_pylist())


def test_an_epoch_is_named_by_the_point_where_it_starts_the_same_from_every_copy(logs: tuple[Path, Path]) -> None:
    a, b = logs  # b's own epoch counter starts again at 0 with id 8: its epochs must not take a's numbers
    rows = epochs_read(f"a={a}", f"b={b}")
    bounded = [(BOUNDED, i, -1 if i < 4 else i - i % 4) for i in range(20) if i % 4 != 3]
    per_record = [(PER_RECORD, i, i or -1) for i in range(20)]
    assert rows == bounded + per_record
    assert epochs_read(f"b={b}", f"a={a}") == rows  # ids 8..11 read from b this time: the same epochs


def test_a_planned_batch_whose_only_copy_died_is_data_loss_never_a_gap(logs: tuple[Path, Path]) -> None:
    a, b = logs
    clock = ManualClock()
    r = FailoverStreamReader(AqueductDataSource({"failover": "true", "log": f"a={a},b={b}"}).parsed, clock)
    start = r.initialOffset()
    end = json.loads(json.dumps(r.latestOffset()))
    parts = through_spark(r.partitions(start, end))
    assert any("a" in piece.piece.candidates for p in parts for piece in p.pieces)
    shutil.rmtree(a)  # bridge a killed with its log, after the batch was planned on it
    # b holds ids 8.. only, and no producer resent 0..7 (here: none is left to): lost, and said so
    with pytest.raises(AqueductDataLoss, match=r"stream 7 records after point -1 \(to 8\) are held by no bridge"):
        [b_ for p in parts for b_ in r.read(p)]
    # the batch is planned again (a task failed): while a is held, it stays a candidate, nothing is lost yet
    r._start_ran = False
    assert r.latestOffset() == end
    assert [p.value for p in r.partitions(start, end)] == [p.value for p in parts]
    clock.now += 10
    r.latestOffset()  # a is left out
    with pytest.raises(AqueductDataLoss, match=r"stream 7 records with points of reference \(-1, 8\]"):
        r.partitions(start, end)


def test_a_batch_planned_on_a_dead_copy_is_read_from_the_copy_the_producer_resent_to(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, range(0, 12))
    write(b, range(0, 4))  # an older copy: b holds the first epoch only
    r = reader(log=f"a={a},b={b}")
    start = r.initialOffset()
    end = json.loads(json.dumps(r.latestOffset()))
    parts = through_spark(r.partitions(start, end))
    shutil.rmtree(a)
    write(b, range(4, 12))  # the producer moved to b and resent everything unacked
    rows = [(x["stream_id"], x["message_id"], x["payload"]) for p in parts for b_ in r.read(p) for x in b_.to_pylist()]
    assert sorted(rows) == sorted(expected(range(0, 12)))
    r.commit(end)
    r.latestOffset()  # the next trigger sees b's resent copy and tells it the commit
    assert acked_point(b, BOUNDED) == 12


def test_batches_go_on_across_a_move_without_repeats(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, range(0, 8))
    b.mkdir()
    r = reader(log=f"a={a}")
    start = r.initialOffset()
    end, rows = batch(r, start)
    assert sorted(rows) == sorted(expected(range(0, 8)))
    # the producer moves: a acked the query's commit (8); it resends nothing below that to b
    shutil.rmtree(b)
    write(b, range(8, 16), start=8)
    r2 = reader(log=f"a={a},b={b}")
    end2, rows2 = batch(r2, end)
    assert sorted(rows2) == sorted(expected(range(8, 16)))
    shutil.rmtree(a)
    write(b, range(16, 20))
    end3, rows3 = batch(r2, end2)
    assert sorted(rows3) == sorted(expected(range(16, 20)))


def test_records_no_bridge_holds_are_data_loss_or_skipped(tmp_path: Path) -> None:
    b = tmp_path / "b"
    write(b, range(8, 12), start=8)  # the copy starts at 8: 0..7 were never read and are gone
    r = reader(log=str(b))
    r.initialOffset()
    r._start = {BOUNDED: 0, PER_RECORD: 0}
    with pytest.raises(AqueductDataLoss, match=r"stream 7 records with points of reference \(0, 8\]"):
        r.latestOffset()
    r = reader(log=str(b), failOnDataLoss="false")
    r.initialOffset()
    start = {"by_id": {str(BOUNDED): 0, str(PER_RECORD): 0}}
    r._start = {BOUNDED: 0, PER_RECORD: 0}
    _, rows = batch(r, start)
    assert sorted(rows) == sorted(expected(range(8, 12)))


def test_offsets_of_the_other_reader_stop_with_what_to_do(logs: tuple[Path, Path]) -> None:
    a, _ = logs
    r = reader(log=str(a))
    with pytest.raises(AqueductOptionError, match="needs its own checkpoint location"):
        r.partitions({"7": 0}, {"7": 4})
    old = through_spark(AqueductDataSource({"log": str(a)}).streamReader(SPARK_STRUCT))
    with pytest.raises(ValueError, match="set failover=true"):
        old.partitions({"by_id": {"7": -1}}, {"by_id": {"7": 4}})


def test_bridges_join_and_leave_through_the_bridge_list(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, range(0, 8))
    write(b, range(4, 12), start=4)
    flight = FlightLogs(tmp_path / "flight")
    try:
        listed = tmp_path / "bridges"
        creds = f"token={flight.token_file} ca={flight.certs.ca}"
        listed.write_text(f"a {flight.address(a)} {creds}\n")
        r = reader(bridgeList=str(listed))
        start = r.initialOffset()
        end, rows = batch(r, start)
        assert sorted(rows) == sorted(expected(range(0, 8)))
        assert "default" not in load_consumers(b)
        listed.write_text(f"a {flight.address(a)} {creds}\nb {flight.address(b)} {creds}\n")
        end, rows = batch(r, end)  # b joins: registered at the query's point, its later records read
        assert "default" in load_consumers(b)
        assert sorted(rows) == sorted(expected(range(8, 12)))
        listed.write_text(f"b {flight.address(b)} {creds}\n")
        r.latestOffset()
        assert list(r.bridges.logs) == ["b"]
    finally:
        flight.close()


def test_idle_wait_answers_once_a_copy_reaches_further_and_the_commit_goes_out_before_it_waits(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, range(0, 8))
    write(b, range(0, 8))
    clock = ManualClock()
    options = AqueductDataSource({"failover": "true", "log": f"a={a},b={b}", "idleWait": "2s"}).parsed
    r = FailoverStreamReader(options, clock)
    start = r.initialOffset()
    end = json.loads(json.dumps(r.latestOffset()))
    r.partitions(start, end)  # the batch ran; Spark's own commit() of it would come only with the next batch
    began = clock.now
    acked_while_waiting: list[int] = []
    clock.at(began, lambda: acked_while_waiting.append(acked_point(b, PER_RECORD)))  # at its first look again
    clock.at(began + 0.3, lambda: write(b, range(8, 12)))  # the producers, acked, send more
    later = r.latestOffset()
    assert acked_while_waiting == [8]  # the batch's commit went out before the wait
    assert later == {"by_id": {str(BOUNDED): 12, str(PER_RECORD): 12}}
    assert 0.3 <= clock.now - began <= 0.3 + REMOTE_IDLE_POLL  # answered on the first look after, not after 2 s
    r.partitions(end, later)
    began = clock.now
    assert r.latestOffset() == later  # nothing more came: the same offsets, after the whole wait
    assert clock.now - began == pytest.approx(2.0)


def test_a_bridge_that_stops_answering_holds_its_streams_then_is_left_out(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, range(0, 12))
    write(b, range(0, 4))  # b lags: only a holds 4..11
    flight = FlightLogs(tmp_path / "flight")
    try:
        options = AqueductDataSource(
            {"failover": "true", "bridge": f"a={flight.address(a)},b={flight.address(b)}",
             **flight.credentials(), "bridgeTimeout": "10s"}
        ).parsed  # fmt: skip
        clock = ManualClock()
        r = FailoverStreamReader(options, clock)
        start = r.initialOffset()
        flight.servers[a].shutdown()  # a stops answering
        held = r.latestOffset()
        assert held == {"by_id": {str(BOUNDED): 4, str(PER_RECORD): 4}}  # b's part only: a is not read while held
        clock.now += 11
        r.latestOffset()
        assert r.bridges.membership.left_out("a", clock.now)
        end = json.loads(json.dumps(held))
        parts = r.partitions(start, end)
        rows = [(x["stream_id"], x["message_id"]) for p in parts for b_ in r.read(p) for x in b_.to_pylist()]
        assert sorted(rows) == sorted((s, i) for s, i, _ in expected(range(0, 4)))
    finally:
        flight.close()


def test_records_without_a_stable_id_go_with_the_stable_record_before_them_once(tmp_path: Path) -> None:
    """An EPHEMERAL record opening an epoch is read with that epoch; one after a stream's last stable record waits for the next."""
    log = DurableLog(tmp_path / "a")
    log.open_stream(BOUNDED, "bounded", "c/1", boundaries=True).result()
    log.open_stream(PER_RECORD, "per-record", "c/1").result()

    def append(sid: int, *records: tuple[bytes | None, int | None]) -> None:
        for payload, mid in records:
            if payload is None:
                log.append(ConnectorMessage.build(sid, message_id=mid, boundary=True))
            else:
                log.append(ConnectorMessage.build(sid, payload, message_id=mid))
        log.commit()  # one group commit: the ranges' edges fall inside index entries

    append(BOUNDED, (b"0", 0), (b"1", 1), (None, 2), (b"e-opens-2", None), (b"3", 3), (None, 4), (b"e-opens-3", None))
    append(PER_RECORD, (b"0", 0), (b"e-after-0", None), (b"1", 1), (b"e-after-1", None))
    r = reader(log=str(tmp_path / "a"))
    end, rows = batch(r, r.initialOffset())
    assert sorted(p for _, _, p in rows) == sorted([b"0", b"1", b"e-opens-2", b"3", b"0", b"e-after-0", b"1"])
    append(BOUNDED, (b"5", 5), (None, 6))
    append(PER_RECORD, (b"2", 2))
    _, rows = batch(r, end)
    assert sorted(p for _, _, p in rows) == sorted([b"e-opens-3", b"5", b"e-after-1", b"2"])
    log.close()


def test_a_batch_read_with_failover_reads_each_record_once_and_registers_nowhere(logs: tuple[Path, Path]) -> None:
    a, b = logs
    source = AqueductDataSource({"failover": "true", "log": f"a={a},b={b}", "endingOffsets": '{"7": 12}'})
    r = through_spark(source.reader(SPARK_STRUCT))
    parts = through_spark(r.partitions())
    rows = [(x["stream_id"], x["message_id"], x["payload"]) for p in parts for b_ in r.read(p) for x in b_.to_pylist()]
    assert sorted(rows) == sorted(
        [row for row in expected(range(0, 12)) if row[0] == BOUNDED] + [row for row in expected(range(0, 20)) if row[0] == PER_RECORD]
    )
    assert load_consumers(a) == load_consumers(b) == {}


def test_a_task_whose_bridge_stops_answering_reads_the_piece_from_another_over_flight(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, range(0, 12))
    write(b, range(0, 8))  # b lags behind a
    flight = FlightLogs(tmp_path / "flight")
    try:
        r = reader(bridge=f"a={flight.address(a)},b={flight.address(b)}", bridgeTimeout="1s", **flight.credentials())
        start = r.initialOffset()
        end = json.loads(json.dumps(r.latestOffset()))
        parts = through_spark(r.partitions(start, end))
        assert {c for p in parts for piece in p.pieces for c in piece.piece.candidates} == {"a"}
        flight.servers[a].shutdown()  # a stops answering after planning
        write(b, range(8, 12))  # the producer moved to b and resent what a held
        rows = [(x["stream_id"], x["message_id"], x["payload"]) for p in parts for b_ in r.read(p) for x in b_.to_pylist()]
        assert sorted(rows) == sorted(expected(range(0, 12)))
    finally:
        flight.close()


def planned_on_a(flight: FlightLogs, a: Path, b: Path, timeout: str) -> tuple[FailoverStreamReader, dict, list]:
    """A reader of bridges a and b (a preferred) and its first batch, planned: its end and partitions."""
    r = reader(bridge=f"a={flight.address(a)},b={flight.address(b)}", bridgeTimeout=timeout, **flight.credentials())
    start = r.initialOffset()
    end = json.loads(json.dumps(r.latestOffset()))
    parts = through_spark(r.partitions(start, end))
    assert all(piece.piece.candidates[0] == "a" for p in parts for piece in p.pieces)
    return r, end, parts


def rows_of(r: FailoverStreamReader, parts: list) -> list[tuple[int, int, bytes]]:
    return [(x["stream_id"], x["message_id"], x["payload"]) for p in parts for b_ in r.read(p) for x in b_.to_pylist()]


def test_a_bridge_stopping_cancels_calls_and_counts_as_unreachable(tmp_path: Path) -> None:
    """A bridge stopping (SIGTERM) answers calls in flight with CANCELLED: the query goes on from the other copy."""
    import pyarrow.flight as pa_flight

    from aqueduct.bridge.network.flight_server import LogFlightServer

    a, b = tmp_path / "a", tmp_path / "b"
    write(a, range(0, 12))
    write(b, range(0, 12))  # a replica: b holds everything a does
    flight = FlightLogs(tmp_path / "flight")

    class Stopping(LogFlightServer):
        """Answers every call as gRPC answers calls in flight while the server shuts down."""

        stopping = False

        def do_get(self, context, ticket):  # type: ignore[no-untyped-def]
            if Stopping.stopping:
                raise pa_flight.FlightCancelledError("Flight cancelled call, with message: CANCELLED")
            return super().do_get(context, ticket)

        def do_action(self, context, action):  # type: ignore[no-untyped-def]
            if Stopping.stopping:
                raise pa_flight.FlightCancelledError("Flight cancelled call, with message: CANCELLED")
            return super().do_action(context, action)

    certs = flight.certs
    flight.servers[a] = Stopping(a, "127.0.0.1", 0, flight.token, certs.server_cert, certs.server_key)
    try:
        r, end, parts = planned_on_a(flight, a, b, "10s")
        Stopping.stopping = True
        assert sorted(rows_of(r, parts)) == sorted(expected(range(0, 12)))  # read from b
        r.commit(end)
        assert acked_point(b, BOUNDED) == 12
        assert r.latestOffset() == end  # planning goes on: a is held, not fatal
        assert "a" not in r.bridges.answered
    finally:
        flight.close()


def test_a_dead_bridge_does_not_stall_a_batch_another_copy_covers(tmp_path: Path) -> None:
    """Planned on a, a dies: the batch is read and committed from the replica at once, not after ``bridgeTimeout``."""
    import time

    a, b = tmp_path / "a", tmp_path / "b"
    write(a, range(0, 12))
    write(b, range(0, 12))  # a replica
    flight = FlightLogs(tmp_path / "flight")
    try:
        r, end, parts = planned_on_a(flight, a, b, "30s")
        flight.servers[a].shutdown()  # killed: its calls are refused from now on
        began = time.monotonic()
        rows = rows_of(r, parts)
        r.commit(end)
        write(b, range(12, 16))
        nxt = json.loads(json.dumps(r.latestOffset()))
        later = [x["message_id"] for p in r.partitions(end, nxt) for b_ in r.read(p) for x in b_.to_pylist()]
        took = time.monotonic() - began
        assert sorted(rows) == sorted(expected(range(0, 12)))
        assert acked_point(b, BOUNDED) == 12
        assert sorted(later) == sorted([i for i in range(12, 16) if i % 4 != 3] + list(range(12, 16)))
        assert took < 5, f"{took:.1f} s: the read waited for the dead bridge (bridgeTimeout is 30 s)"
    finally:
        flight.close()
