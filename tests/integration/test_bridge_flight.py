"""The log over the network: a real Flight server (TLS, token) on loopback, real log files.

Without Spark: the calls the source makes, the credential check on each,
record ranges equal to the local read byte for byte, the planner's
snapshot sync, and reads over several bridges in one query.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from aqueduct.bridge.source.datasource import SPARK_STRUCT, AqueductDataSource, AqueductOptionError
from aqueduct.bridge.source.flight_client import RemoteCorruption, RemoteLog
from aqueduct.bridge.storage.commits import read_committed
from aqueduct.bridge.storage.consumers import ALL_STREAMS, ConsumerError, load_consumers
from aqueduct.bridge.storage.corruption import corrupt_ranges
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.bridge.storage.view import load_streams
from aqueduct.connector.frames import ConnectorMessage
from tests.corrupting import flip_a_bit_in_stored_batch
from tests.integration.test_failover_commit_errors import DiskFull
from tests.log_locations import FlightLogs


@pytest.fixture
def flights(tmp_path: Path):
    f = FlightLogs(tmp_path / "flight")
    yield f
    f.close()


def fill(log: DurableLog, sid: int, n: int, name: str = "s") -> None:
    """``n`` epochs of three records and a boundary, committed one epoch at a time (several segments)."""
    log.open_stream(sid, f"{name}-{sid}", "c/1", boundaries=True).result()
    mid = 0
    for _ in range(n):
        for j in range(3):
            log.append(ConnectorMessage.build(sid, b"%d-%d" % (sid, mid) * (j + 1), message_id=mid))
            mid += 1
        log.append(ConnectorMessage.build(sid, message_id=mid, boundary=True))
        mid += 1
        log.commit()


@pytest.fixture
def log(tmp_path: Path):
    with DurableLog(tmp_path / "log", segment_bytes=2000) as lg:
        fill(lg, 1, 20)
        fill(lg, 7, 5)
        yield lg


def ipc_bytes(batches: list[pa.RecordBatch]) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as w:
        for b in batches:
            w.write_batch(b)
    return sink.getvalue().to_pybytes()


def test_ranges_read_over_flight_equal_the_local_reads_byte_for_byte(log: DurableLog, flights: FlightLogs) -> None:
    remote = RemoteLog(flights.address(log.path), flights.token, flights.certs.ca.read_bytes())
    local = load_streams(log.path)
    assert len(local[1].entries) > 10  # the ranges below cross entries and segments
    for sid, start, end in [(1, 0, 80), (1, 5, 6), (1, 13, 61), (7, 0, 20), (7, 4, 8)]:
        here = list(local[sid].read(start, end))
        there = list(remote.fetch(sid, start, end))
        assert ipc_bytes(there) == ipc_bytes(here)
        assert pa.Table.from_batches(there).num_rows == end - start


def test_the_planner_sees_the_same_streams_and_only_changes_travel(log: DurableLog, flights: FlightLogs) -> None:
    remote = RemoteLog(flights.address(log.path), flights.token, flights.certs.ca.read_bytes())
    snapshots = remote.snapshots()
    first = snapshots.load()
    assert snapshots.changed is None  # the first answer is everything
    local = load_streams(log.path)
    assert {sid: (s.meta, s.entries) for sid, s in first.items()} == {
        sid: (s.meta, s.entries) for sid, s in local.items()
    }
    assert first[1].epoch_at(45) == local[1].epoch_at(45)  # record columns come over Flight
    assert first[1].first_offset_of_epoch_at_least(3) == 12
    assert snapshots.load() is first and snapshots.changed == set()  # nothing new: the very same dict
    log.append(ConnectorMessage.build(7, b"more", message_id=20))
    log.commit()
    second = snapshots.load()
    assert snapshots.changed == {7} and second[1] is first[1]
    assert second[7].end == 21
    fill(log, 3, 1)
    third = snapshots.load()
    assert list(third) == [1, 3, 7] and snapshots.changed == {3}


def test_a_restarted_server_is_synced_from_scratch(log: DurableLog, flights: FlightLogs) -> None:
    address = flights.address(log.path)
    remote = RemoteLog(address, flights.token, flights.certs.ca.read_bytes())
    snapshots = remote.snapshots()
    before = snapshots.load()
    flights.servers.pop(log.path).shutdown()
    assert snapshots.load() is before and snapshots.changed == set()  # unreachable: planning keeps its view
    remote.commit("q", {1: 4}, 0)  # a commit it misses is covered by the next one
    port = int(address.rsplit(":", 1)[1])
    from aqueduct.bridge.network.flight_server import start_flight_server

    flights.servers[log.path] = start_flight_server(
        log.path, "127.0.0.1", port, token=flights.token,
        certfile=flights.certs.server_cert, keyfile=flights.certs.server_key,
    )  # fmt: skip
    after = snapshots.load()  # a new channel: no reconnect backoff to wait out
    assert snapshots.changed is None and after.keys() == before.keys()


def test_a_commit_the_bridge_fails_is_logged_and_covered_by_the_next(
    log: DurableLog, flights: FlightLogs, caplog: pytest.LogCaptureFixture
) -> None:
    """Its log disk full as it writes the commit file: the query goes on (the sink has the batch), ACKs wait."""
    certs = flights.certs
    full = DiskFull(log.path, "127.0.0.1", 0, flights.token, certs.server_cert, certs.server_key)
    flights.servers[log.path] = full
    remote = RemoteLog(flights.address(log.path), flights.token, certs.ca.read_bytes())
    full.full = 1
    with caplog.at_level(logging.WARNING, logger="aqueduct.bridge.source"):
        remote.commit("q", {1: 4}, 0)  # no exception
    assert read_committed(log.path, "q") is None
    [said] = [r for r in caplog.records if f"commit to bridge {remote.address} failed" in r.getMessage()]
    assert said.levelno == logging.ERROR
    assert "No space left on device" in said.getMessage() and "Traceback" not in said.getMessage()
    remote.commit("q", {1: 8}, 0)
    assert read_committed(log.path, "q") == {1: 8}


@pytest.mark.parametrize("token", [None, "", "wrong", "Bearer x"])
def test_a_missing_or_wrong_credential_is_refused_and_serves_nothing(
    log: DurableLog, flights: FlightLogs, token: str | None
) -> None:
    client = flight.FlightClient(
        f"grpc+tls://{flights.address(log.path)}", tls_root_certs=flights.certs.ca.read_bytes()
    )
    headers = [] if token is None else [(b"authorization", f"Bearer {token}".encode())]
    options = flight.FlightCallOptions(headers=headers, timeout=30)
    calls = [
        lambda: client.do_get(flight.Ticket(b'{"stream": 1, "start": 0, "end": 4}'), options).read_all(),
        lambda: list(client.do_action(flight.Action("streams", b"{}"), options)),
        lambda: list(client.do_action(flight.Action("register", b'{"consumer": "thief"}'), options)),
        lambda: list(client.do_action(flight.Action("commit", b'{"consumer": "default", "offsets": {"1": 80}}'), options)),
        lambda: list(client.list_actions(options)),
    ]
    for call in calls:
        with pytest.raises(flight.FlightUnauthenticatedError, match="missing or wrong credential"):
            call()
    assert load_consumers(log.path) == {}
    assert read_committed(log.path, "default") is None
    client.close()


def test_the_registry_calls_act_on_the_bridges_files(log: DurableLog, flights: FlightLogs) -> None:
    remote = RemoteLog(flights.address(log.path), flights.token, flights.certs.ca.read_bytes())
    remote.register("q1", {1: 8}, ALL_STREAMS)
    assert load_consumers(log.path)["q1"].start == {1: 8}
    remote.commit("q1", {1: 12, 7: 0}, 3)
    assert read_committed(log.path, "q1") == {1: 12, 7: 0}
    remote.check_not_dropped("q1")
    reader = RemoteLog(flights.address(log.path), flights.token, flights.certs.ca.read_bytes(), consumer="q1")
    snapshots = reader.snapshots()
    snapshots.load()  # names q1: the answer says whether it was dropped
    reader.check_not_dropped("q1")
    from aqueduct.bridge.storage.consumers import drop_consumer

    drop_consumer(log.path, "q1", "too far behind")
    with pytest.raises(ConsumerError, match="consumer 'q1' was dropped \\(too far behind\\)"):
        remote.check_not_dropped("q1")  # asked on its own (a reader with no consumer, or an older bridge)
    snapshots.load()
    with pytest.raises(ConsumerError, match="consumer 'q1' was dropped \\(too far behind\\)"):
        reader.check_not_dropped("q1")  # told with the streams
    for bad in ("../escape", ""):
        with pytest.raises(ConsumerError, match="consumer name must be"):
            remote.commit(bad, {1: 1}, 0)
    assert not (log.path.parent / "escape.json").exists()


def test_a_commit_with_a_malformed_offset_is_refused_and_changes_nothing(log: DurableLog, flights: FlightLogs) -> None:
    """The server reads offsets with the source's one parser: a negative position is refused, not stored."""
    remote = RemoteLog(flights.address(log.path), flights.token, flights.certs.ca.read_bytes())
    remote.register("q1", {1: 8}, ALL_STREAMS)
    remote.commit("q1", {1: 12}, 0)
    client = flight.FlightClient(
        f"grpc+tls://{flights.address(log.path)}", tls_root_certs=flights.certs.ca.read_bytes()
    )
    options = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {flights.token}".encode())], timeout=30)
    for body in (b'{"consumer": "q1", "offsets": {"1": -1}}', b'{"consumer": "q1", "offsets": {"x": 3}}'):
        with pytest.raises(flight.FlightServerError, match="bad commit request: OffsetError.*non-negative integer"):
            list(client.do_action(flight.Action("commit", body), options))
    client.close()
    assert read_committed(log.path, "q1") == {1: 12}


def test_one_query_over_two_bridges_names_each_rows_log(tmp_path: Path, flights: FlightLogs) -> None:
    logs = {}
    for name in ("eu", "us"):
        with DurableLog(tmp_path / name / "log") as lg:
            fill(lg, 1, 2, name)
        logs[name] = tmp_path / name / "log"
    bridges = ",".join(f"{n}={flights.address(p)}" for n, p in logs.items())
    src = pickle.loads(pickle.dumps(AqueductDataSource({"bridge": bridges, "consumer": "both", **flights.credentials()})))
    assert src.schema().fieldNames()[-1] == "log"
    r = pickle.loads(pickle.dumps(src.streamReader(SPARK_STRUCT)))
    start = r.initialOffset()
    end = r.next_end(start, ReadAllAvailable())
    assert end == {"eu/1": 8, "us/1": 8}
    rows = [row for p in pickle.loads(pickle.dumps(r.partitions(start, end))) for b in r.read(p) for row in b.to_pylist()]
    assert sorted({row["log"] for row in rows}) == ["eu", "us"] and len(rows) == 12
    r.commit(end)
    assert read_committed(logs["eu"], "both") == {1: 8} and read_committed(logs["us"], "both") == {1: 8}


def test_the_credential_never_shows_in_options_or_reprs(log: DurableLog, flights: FlightLogs) -> None:
    options = flights.options(log.path)
    assert flights.token not in json.dumps(options)
    r = AqueductDataSource(options).streamReader(SPARK_STRUCT)
    assert flights.token not in repr(r.logs) and flights.token not in repr(r.options)
    assert flights.token.encode() in pickle.dumps(r)  # it travels to executors inside the reader


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bridge": "nohost"}, "a bridge address is HOST:PORT, got 'nohost'"),
        ({"bridge": "a:1,b:2"}, r"several bridges need names \(bridge=NAME=HOST:PORT,NAME=HOST:PORT\)"),
        ({"bridge": "eu=a:1,eu=b:2"}, "two logs named alike"),
        ({"bridge": "127.0.0.1:9", "bridgeTokenFile": "/nonexistent/t"}, "cannot read '/nonexistent/t' for bridge"),
        ({"bridge": "127.0.0.1:9", "bridgeTokenEnv": "AQ_TEST_UNSET"}, "environment variable AQ_TEST_UNSET is not set"),
    ],
)
def test_bad_bridge_options_are_refused(options: dict, message: str) -> None:
    os.environ.pop("AQ_TEST_UNSET", None)
    with pytest.raises(AqueductOptionError, match=message):
        AqueductDataSource(options).streamReader(SPARK_STRUCT)


def test_credential_options_need_a_bridge(log: DurableLog) -> None:
    with pytest.raises(AqueductOptionError, match="bridgeTokenFile only apply with option 'bridge'"):
        AqueductDataSource({"log": str(log.path), "bridgeTokenFile": "/x"})


def test_a_read_waits_for_a_bridge_that_comes_back(log: DurableLog, flights: FlightLogs, caplog) -> None:
    """A task reading from a bridge that is down for a moment (killed, restarting) waits for it."""
    from aqueduct.bridge.network.flight_server import start_flight_server

    address = flights.address(log.path)
    port = int(address.rsplit(":", 1)[1])
    remote = RemoteLog(address, flights.token, flights.certs.ca.read_bytes())
    here = list(load_streams(log.path)[1].read(0, 80))
    flights.servers.pop(log.path).shutdown()  # the bridge is gone ...

    def restart() -> None:  # ... and back half a second later, on the same port
        time.sleep(0.5)
        flights.servers[log.path] = start_flight_server(
            log.path, "127.0.0.1", port, token=flights.token,
            certfile=flights.certs.server_cert, keyfile=flights.certs.server_key,
        )  # fmt: skip

    t = threading.Thread(target=restart)
    t.start()
    there = list(remote.fetch(1, 0, 80))
    t.join()
    assert ipc_bytes(there) == ipc_bytes(here)
    assert "unreachable mid-read" in caplog.text


def test_a_flipped_byte_is_reported_over_flight_never_sent(log: DurableLog, flights: FlightLogs) -> None:
    """The network read path checks each stored batch's CRC32C, as the local read does."""
    bad = flip_a_bit_in_stored_batch(log.path, 7, 1)
    remote = RemoteLog(flights.address(log.path), flights.token, flights.certs.ca.read_bytes())
    with pytest.raises(RemoteCorruption, match=rf"stream 7 records \[{bad.first_offset}, {bad.end_offset}\)"):
        list(remote.fetch(7, 0, 20))
    kept = pa.Table.from_batches(list(remote.fetch(7, 0, 20, skip_corrupt=True)))
    assert kept.num_rows == 20 - (bad.end_offset - bad.first_offset)  # failOnDataLoss=false: that batch only
    lost = set(range(bad.first_offset, bad.end_offset))
    assert lost.isdisjoint(kept.column("message_id").to_pylist())  # fill(): ids are the offsets
    assert corrupt_ranges(log.path) == [(7, bad.first_offset, bad.end_offset)]  # the bridge recorded it


def test_a_read_resumed_past_a_skipped_corrupt_batch_reads_no_record_twice(
    log: DurableLog, flights: FlightLogs
) -> None:
    """failOnDataLoss=false and a stream broken mid-read: the resume starts after the last batch received.

    Each batch carries the offset after it; counting rows instead would
    fall one skipped batch short and read records twice.
    """
    import pyarrow.flight as flight

    from aqueduct.bridge.network.flight_server import LogFlightServer

    bad = flip_a_bit_in_stored_batch(log.path, 7, 1)

    class BreaksOnce(LogFlightServer):
        """The first read's stream breaks after two batches, as when a bridge dies mid-read."""

        broke = False

        def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
            batches = self.tagged_batches(ticket)
            if BreaksOnce.broke:
                return flight.GeneratorStream(batches[0][0].schema, iter(batches))
            BreaksOnce.broke = True

            def breaking():
                yield from batches[:2]
                raise flight.FlightUnavailableError("aqueduct bridge: going away")

            return flight.GeneratorStream(batches[0][0].schema, breaking())

    server = BreaksOnce(log.path, "127.0.0.1", 0, flights.token, flights.certs.server_cert, flights.certs.server_key)
    try:
        remote = RemoteLog(f"127.0.0.1:{server.port}", flights.token, flights.certs.ca.read_bytes())
        kept = pa.Table.from_batches(list(remote.fetch(7, 0, 20, skip_corrupt=True)))
    finally:
        server.shutdown()
    assert BreaksOnce.broke
    ids = kept.column("message_id").to_pylist()  # fill(): ids are the offsets
    assert len(ids) == len(set(ids))  # nothing read twice
    assert set(ids) == set(range(20)) - set(range(bad.first_offset, bad.end_offset))
