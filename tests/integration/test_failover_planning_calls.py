"""How a failover query's planning calls its bridges, with real Flight servers: side by side, and a
partitioned bridge (its host drops packets: not dead, silent) costing each trigger at most
``bridgeConnectTimeout``, not ``bridgeTimeout``.

The partitioned host is a listener that accepts nothing: its accept queue
is full, so the kernel drops every further SYN, as a firewall dropping
packets would, and a connection attempt hangs until someone gives up.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aqueduct.bridge.network.flight_server import LogFlightServer
from tests.integration.test_failover_source import batch, expected, reader, write
from tests.log_locations import FlightLogs

BRIDGE_TIMEOUT = 60  # seconds
CONNECT_TIMEOUT = 3  # seconds: below bridgeTimeout (4 s), what a trigger waiting for x would take


@contextlib.contextmanager
def silent_host() -> Iterator[int]:
    """A loopback port whose SYNs are dropped (a listener with a full accept queue that never accepts)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = []
    try:
        for _ in range(3):  # fill the accept queue (and the SYN queue's way to it)
            s = socket.socket()
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                s.connect(("127.0.0.1", port))
            queued.append(s)
        with pytest.raises(TimeoutError):  # the precondition: a connect to it hangs
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        yield port
    finally:
        for s in queued:
            s.close()
        listener.close()


def test_a_partitioned_bridge_costs_each_trigger_the_connect_timeout_not_the_bridge_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = tmp_path / "a"
    write(a, range(0, 8))
    flight = FlightLogs(tmp_path / "flight")
    try:
        with silent_host() as port, caplog.at_level(logging.WARNING):
            r = reader(
                bridge=f"a={flight.address(a)},x=127.0.0.1:{port}", bridgeTimeout=f"{BRIDGE_TIMEOUT}s",
                bridgeConnectTimeout="1s", **flight.credentials(),
            )  # fmt: skip
            began = time.monotonic()
            start = r.initialOffset()
            end, rows = batch(r, start)
            write(a, range(8, 12))
            end, more = batch(r, json.loads(json.dumps(end)))
            r.latestOffset()
            took = time.monotonic() - began
        assert sorted(rows + more) == sorted(expected(range(0, 12)))  # a's streams never waited for x
        assert "x" not in r.bridges.answered and r.bridges.membership.held("x", time.monotonic())
        assert any("bridge x cannot be reached" in m for m in caplog.messages)
        # four triggers, each asking x once and giving up after the connect timeout (1 s): together less
        # than one call that waited for bridgeTimeout (what each trigger waited without a connect timeout)
        assert took < BRIDGE_TIMEOUT, took
    finally:
        flight.close()


def test_a_trigger_asks_every_bridge_at_once(tmp_path: Path) -> None:
    """Three bridges whose index answers each wait until all three were asked: planning ends only if it asks them together."""
    logs = [tmp_path / n for n in "abc"]
    for i, log in enumerate(logs):
        write(log, range(4 * i, 4 * i + 4), start=4 * i)
    asked = threading.Barrier(3, timeout=10)  # a hang guard: a planner asking one after another breaks it

    class Together(LogFlightServer):
        def do_action(self, context, action):  # type: ignore[no-untyped-def]
            if action.type == "streams":
                asked.wait()
            return super().do_action(context, action)

    flight = FlightLogs(tmp_path / "flight")
    for log in logs:
        flight.servers[log] = Together(log, "127.0.0.1", 0, flight.token, flight.certs.server_cert, flight.certs.server_key)
    try:
        r = reader(bridge=",".join(f"{log.name}={flight.address(log)}" for log in logs), **flight.credentials())
        end, rows = batch(r, r.initialOffset())
        assert r.bridges.answered == {"a", "b", "c"}
        assert sorted(rows) == sorted(expected(range(0, 12)))
    finally:
        flight.close()


def test_a_bridge_left_out_is_asked_in_the_background_and_read_again_once_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Left out (silent for bridgeTimeout), x costs the triggers nothing; b, stopped then started again, is read again."""
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, range(0, 8))
    write(b, range(8, 12), start=8)
    flight = FlightLogs(tmp_path / "flight")
    b_address = flight.address(b)
    try:
        with silent_host() as port:
            r = reader(
                bridge=f"a={flight.address(a)},b={b_address},x=127.0.0.1:{port}", bridgeTimeout="4s",
                bridgeConnectTimeout=f"{CONNECT_TIMEOUT}s", **flight.credentials(),
            )  # fmt: skip
            start = r.initialOffset()  # x's first failure: it is held from now on
            flight.servers.pop(b).shutdown()  # b refuses from now on
            deadline = time.monotonic() + 60  # a hang guard
            while not {"b", "x"} <= {n for n in r.bridges.logs if r.bridges.membership.left_out(n, time.monotonic())}:
                assert time.monotonic() < deadline
                r.latestOffset()
            for _ in range(3):  # x is asked at every trigger, none waits for it
                began = time.monotonic()
                r.latestOffset()
                assert time.monotonic() - began < CONNECT_TIMEOUT
            flight.servers[b] = LogFlightServer(
                b, "127.0.0.1", int(b_address.rsplit(":", 1)[1]), flight.token, flight.certs.server_cert,
                flight.certs.server_key,
            )  # fmt: skip
            while "b" not in r.bridges.answered:  # asked in the background, then read again
                assert time.monotonic() < deadline
                r.latestOffset()
            end, rows = batch(r, start)
        assert sorted(rows) == sorted(expected(range(0, 12)))
        assert "x" not in r.bridges.answered
    finally:
        flight.close()
