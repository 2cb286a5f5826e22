"""A failover query whose commit one bridge answers with an error, over real Flight on loopback.

The sink has the records once the query commits; telling each bridge is
only what lets it ack its producers. So a bridge that cannot take a
commit (here its log disk is full as it writes the commit file) must not
stop the query over every other bridge: its ACKs wait, the error is
logged where an operator looks, and the next commit that reaches it covers
the missed one (offsets are absolute).
"""

from __future__ import annotations

import errno
import json
import logging
from pathlib import Path

import pytest

from aqueduct.bridge.network.flight_server import LogFlightServer
from aqueduct.bridge.storage.commits import read_committed
from tests.integration.test_failover_source import (
    BOUNDED,
    PER_RECORD,
    acked_point,
    batch,
    expected,
    reader,
    write,
)
from tests.log_locations import FlightLogs


class DiskFull(LogFlightServer):
    """A bridge whose next ``full`` commits fail as a full log disk makes them fail."""

    full = 0

    def do_action(self, context, action):  # type: ignore[no-untyped-def]
        if action.type == "commit" and self.full:
            self.full -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().do_action(context, action)


def test_a_bridge_failing_a_commit_holds_its_acks_back_and_the_query_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, range(0, 12))
    write(b, range(8, 20), start=8)  # the producer moved to b, acked up to 8
    flight_logs = FlightLogs(tmp_path / "flight")
    certs = flight_logs.certs
    for log, kind in ((a, LogFlightServer), (b, DiskFull)):
        flight_logs.servers[log] = kind(log, "127.0.0.1", 0, flight_logs.token, certs.server_cert, certs.server_key)
    full = flight_logs.servers[b]
    try:
        r = reader(bridge=f"a={flight_logs.address(a)},b={flight_logs.address(b)}", **flight_logs.credentials())
        full.full = 1
        with caplog.at_level(logging.WARNING, logger="aqueduct.bridge.source"):
            end, rows = batch(r, r.initialOffset())  # its commit reaches a, and fails at b: no exception
        assert sorted(rows) == sorted(expected(range(0, 20)))
        assert acked_point(a, PER_RECORD) == 12  # a acks what the query committed
        assert read_committed(b, "default") is None  # b's producer is not acked: it keeps its records
        [said] = [r for r in caplog.records if "commit to bridge b failed" in r.getMessage()]
        assert said.levelno == logging.ERROR
        assert "No space left on device" in said.getMessage() and "Traceback" not in said.getMessage()

        assert full.full == 0  # b has room again: the next trigger's commit covers the missed one
        assert json.loads(json.dumps(r.latestOffset())) == end
        r.commit(end)
        assert acked_point(b, PER_RECORD) == acked_point(b, BOUNDED) == 20
    finally:
        flight_logs.close()
