"""A failover bridge that goes away halfway through a trigger's visit, over real Flight on loopback.

A visit (:meth:`~aqueduct.bridge.source.failover_bridges.FailoverBridges.refresh`)
asks a bridge for its streams, then works out where each copy's closed
epochs end: a record lookup per stream whose last epoch closed inside a
stored batch. A bridge can stop answering between two of those lookups.
It is then held (its last whole snapshot stands for its copies, nothing is
asked of it), and the query goes on; it must never ask that bridge again
within the trigger, which would stop the query with the bridge's
``FlightUnavailableError``. Seen in the rolling-restart Spark test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.flight as flight

from aqueduct.bridge.network.flight_server import LogFlightServer
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.frames import ConnectorMessage
from tests.integration.test_failover_source import batch, reader
from tests.log_locations import FlightLogs

STREAMS = (7, 9)  # two streams with BOUNDARY records (every 4th id), so two lookups per visit


def grow(path: Path, ids: range) -> None:
    """Records ``ids`` of both streams, one group commit: each stream's last epoch closes inside the batch."""
    log = DurableLog(path)
    for sid in STREAMS:
        log.open_stream(sid, f"s{sid}", "c/1", boundaries=True).result()
    for sid in STREAMS:
        for i in ids:
            if i % 4 == 3:
                log.append(ConnectorMessage.build(sid, message_id=i, boundary=True))
            else:
                log.append(ConnectorMessage.build(sid, b"%d" % i, message_id=i))
    log.commit()
    log.close()


def rows(ids: range) -> list[tuple[int, int, bytes]]:
    return sorted((sid, i, b"%d" % i) for sid in STREAMS for i in ids if i % 4 != 3)


class GoingAway(LogFlightServer):
    """A bridge that serves ``reads_left`` more record reads, then answers nothing (None: no limit)."""

    reads_left: int | None = None

    def _answering(self) -> None:
        if self.reads_left == 0:
            raise flight.FlightUnavailableError("aqueduct test: the bridge went away")

    def do_get(self, context, ticket):  # type: ignore[no-untyped-def]
        self._answering()
        if self.reads_left is not None:
            self.reads_left -= 1
        return super().do_get(context, ticket)

    def do_action(self, context, action):  # type: ignore[no-untyped-def]
        self._answering()
        return super().do_action(context, action)


def test_a_bridge_gone_between_two_lookups_of_a_visit_is_held_and_never_asked_again_in_that_trigger(
    tmp_path: Path,
) -> None:
    a = tmp_path / "a"
    grow(a, range(0, 6))  # closed epochs end at id 3, inside the batch: a lookup each
    flight_logs = FlightLogs(tmp_path / "flight")
    certs = flight_logs.certs
    server = GoingAway(a, "127.0.0.1", 0, flight_logs.token, certs.server_cert, certs.server_key)
    flight_logs.servers[a] = server
    try:
        r = reader(bridge=f"a={flight_logs.address(a)}", **flight_logs.credentials())
        end, first = batch(r, r.initialOffset())
        assert sorted(first) == rows(range(0, 3))
        grow(a, range(6, 10))  # both streams' epochs now close at id 7, inside the new batch
        server.reads_left = 1  # the next visit's first lookup is answered, its second is not
        assert r.latestOffset() == end  # the query goes on: a is held, its streams wait
        assert "a" not in r.bridges.answered and server.reads_left == 0
        server.reads_left = None  # a is back
        _, later = batch(r, json.loads(json.dumps(end)))
        assert sorted(later) == rows(range(3, 7))  # then read once, from where the query was
    finally:
        flight_logs.close()
