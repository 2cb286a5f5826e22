"""What the failover reader tells its bridges, and which streams it reads, on real logs (locally and over Flight).

- records skipped with ``failOnDataLoss=false`` reach the ``skipped_records``
  of the bridge whose copy goes on after them, counted once;
- a bridge that dropped the query's consumer stops the query with
  ``AqueductDataLoss``, as with one bridge;
- streams failover does not cover say so: an UNORDERED or UNRELIABLE stream
  stops the query with what to do, a stream holding no stable record is
  warned about once and read with its first stable record.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.flight as flight
import pytest

from aqueduct.bridge.source.datasource import AqueductDataLoss, AqueductOptionError
from aqueduct.bridge.storage.commits import commit_file
from aqueduct.bridge.storage.consumers import drop_consumer
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.frames import ConnectorMessage
from aqueduct.wire.modes import Mode
from tests.integration.test_failover_source import (
    BOUNDED,
    PER_RECORD,
    batch,
    expected,
    reader,
    write,
)
from tests.log_locations import LogLocation


@pytest.fixture(params=["log", "bridge"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LogLocation]:
    location = LogLocation(request.param, tmp_path / "flight")
    yield location
    location.close()


def options(where: LogLocation, **logs: Path) -> dict[str, str]:
    """Options reading ``logs`` (name -> directory) as one failover query, locally or over Flight."""
    if where.flight is None:
        return {"log": ",".join(f"{n}={p}" for n, p in logs.items())}
    return {"bridge": ",".join(f"{n}={where.flight.address(p)}" for n, p in logs.items()), **where.flight.credentials()}


def skipped_records(log: Path) -> int:
    return json.loads(commit_file(log, "default").read_text())["skipped_records"]


def test_records_skipped_as_lost_are_counted_once_by_the_bridge_that_holds_what_follows(
    tmp_path: Path, where: LogLocation
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, range(0, 4))  # a holds the first epoch ...
    write(b, range(8, 16), start=8)  # ... b from 8 on: ids 4..7 of each stream are held by no bridge
    r = reader(**options(where, a=a, b=b), failOnDataLoss="false")
    end, rows = batch(r, r.initialOffset())  # latestOffset and partitions both meet the gap
    assert sorted(rows) == sorted(expected(range(0, 4)) + expected(range(8, 16)))
    r.latestOffset()  # the next trigger commits the batch (Spark asks for the next end once it committed)
    assert skipped_records(b) == 8  # 4 ids of each stream, counted once
    assert skipped_records(a) == 0
    write(b, range(16, 20))
    end, rows = batch(r, end)
    r.latestOffset()
    assert sorted(rows) == sorted(expected(range(16, 20)))
    assert skipped_records(b) == 8  # nothing skipped since: not counted again


def actions_served(where: LogLocation, *logs: Path) -> list[str]:
    """The Flight actions the bridges serving ``logs`` answer from now on, in order (none when read locally)."""
    served: list[str] = []
    for log in logs if where.flight is not None else ():
        server = where.flight.server(log)  # type: ignore[union-attr]
        answer = server.do_action

        def recorded(context: object, action: flight.Action, answer: Callable = answer) -> object:
            served.append(action.type)
            return answer(context, action)

        server.do_action = recorded  # type: ignore[method-assign]
    return served


def test_a_bridge_that_dropped_the_query_s_consumer_stops_it_with_data_loss(tmp_path: Path, where: LogLocation) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, range(0, 8))
    write(b, range(4, 12), start=4)
    r = reader(**options(where, a=a, b=b))
    end, _ = batch(r, r.initialOffset())
    served = actions_served(where, a, b)
    r.latestOffset()  # a trigger asks whether the consumer was dropped with its streams call: no call of its own
    assert "check_consumer" not in served
    assert where.flight is None or served.count("streams") == 2
    drop_consumer(b, "default", "fell 10000 records behind")
    with pytest.raises(AqueductDataLoss, match=r"bridge b: consumer 'default' was dropped \(fell 10000 records behind\)"):
        r.latestOffset()
    assert "check_consumer" not in served


def one_stream(path: Path, sid: int, mode: Mode) -> None:
    log = DurableLog(path)
    log.open_stream(sid, f"s{sid}", "c/1", mode=mode).result()
    log.append(ConnectorMessage.build(sid, b"x", message_id=0))
    log.commit()
    log.close()


@pytest.mark.parametrize("mode", [Mode.UNORDERED, Mode.UNRELIABLE])
def test_an_unordered_stream_stops_the_query_saying_how_to_leave_it_out(
    tmp_path: Path, where: LogLocation, mode: Mode
) -> None:
    a = tmp_path / "a"
    write(a, range(0, 4))
    one_stream(a, 9, mode)
    with pytest.raises(AqueductOptionError) as e:
        reader(**options(where, a=a)).initialOffset()
    assert str(e.value) == (
        f"aqueduct source: stream 9 ('s9', on bridge a) is {mode.name}: a failover query reads ORDERED streams only "
        f"(the point of reference of an {mode.name} stream is the first id not yet received, so its records carry "
        "different points on different bridges); leave it out of this query (option streams or streamPattern) and "
        "read it with failover=false"
    )
    r = reader(**options(where, a=a), streams=f"{BOUNDED},{PER_RECORD}")  # left out: the others are read
    _, rows = batch(r, r.initialOffset())
    assert sorted(rows) == sorted(expected(range(0, 4)))


def test_a_stream_without_a_stable_record_is_warned_about_once_and_read_with_its_first_one(
    tmp_path: Path, where: LogLocation, caplog: pytest.LogCaptureFixture
) -> None:
    a = tmp_path / "a"
    write(a, range(0, 4))
    log = DurableLog(a)
    log.open_stream(9, "ephemeral", "c/1").result()
    for i in range(3):
        log.append(ConnectorMessage.build(9, b"e%d" % i))  # EPHEMERAL: no id
    log.commit()
    r = reader(**options(where, a=a))
    with caplog.at_level(logging.WARNING, logger="aqueduct.bridge.source.failover_bridges"):
        end, rows = batch(r, r.initialOffset())
        end, more = batch(r, end)
    warned = [m for m in caplog.messages if "stream 9 holds records but none with a stable id" in m]
    assert len(warned) == 1 and "read it with failover=false" in warned[0]
    assert sorted(rows + more) == sorted(expected(range(0, 4)))  # stream 9 waits
    log.append(ConnectorMessage.build(9, b"s0", message_id=0))
    log.commit()
    log.close()
    _, rows = batch(r, end)
    assert sorted(p for s, _, p in rows if s == 9) == [b"e0", b"e1", b"e2", b"s0"]  # with it, once
