"""Streams that outlive their bridge, with real processes: producers move, one query reads across bridges.

Every test runs ingest-only bridges as ``aqueduct-bridge serve`` processes,
producers as Connectors given several bridges' URLs (each starting on a
different one), and a user's query over every bridge with
``failover=true`` into Parquet (:mod:`bench.fleet_processes`). A fault
comes while the producers are mid-stream (their small unacked buffers
pace them to the query's commits), and every test ends with
the same verdict: every (stream id, message id) in the sink once with its
payload, in id order, epochs whole, and every record acked. How long a
producer's ACKs stalled is reported with the verdict but not asserted
(tests never depend on speed): ``python -m bench.failover`` measures it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bench.fleet_processes import (
    Fleet,
    Partition,
    bridge_options,
    lose_a_bridge,
    rotated,
    write_bridge_list,
)
from demo.workload import Workload
from tests.spark.bridge_fleet import start_driver
from tests.spark.standalone import StandaloneCluster

pytestmark = [pytest.mark.slow, pytest.mark.spark]

#: committed rows of the affected producers before the fault: the query is past its start, the producers mid-stream
ROWS_BEFORE_FAULT = 100


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    f = Fleet(tmp_path)
    yield f
    await f.close()


def stream_ids(workload: Workload, producers: range) -> list[int]:
    return [sid for p in producers for sid in workload.stream_ids(p)]


async def test_producers_move_to_the_other_bridge_when_theirs_is_killed_and_its_log_lost(
    spark: object, fleet: Fleet
) -> None:
    """The new user's test: 4 producers given both URLs, bridge 1 SIGKILLed and its log deleted a few seconds in."""
    verdict = await lose_a_bridge(fleet, spark, Workload(producers=4, streams=2, events=1500, epoch=40))
    verdict.check()
    assert all(fleet.producers[p].moves >= 1 for p in range(0, 4, 2)), verdict.report()  # p0, p2 started on b1


async def test_with_two_replicas_a_killed_bridge_stalls_no_producer(spark: object, fleet: Fleet) -> None:
    """``replicas=2``: every stream goes to both bridges; one killed, the other acks everything, once."""
    verdict = await lose_a_bridge(fleet, spark, Workload(producers=4, streams=2, events=1500, epoch=40), replicas=2)
    verdict.check()


async def test_a_partition_from_the_producers_moves_them_while_the_query_still_reads_bridge_1(
    spark: object, fleet: Fleet
) -> None:
    """Producers lose bridge 1 (their connections reset, new ones refused); the query still reaches its Flight server."""
    workload = Workload(producers=4, streams=2, events=1500, epoch=40)
    b1, b2 = await fleet.add_bridges("b1", "b2")
    relay = Partition(b1.tcp_port)
    await relay.start()
    fleet.start_query(spark, bridge_options([b1, b2]))
    fleet.start_producers(workload, lambda p: rotated([relay.url, b2.url], p))
    on_b1 = range(0, 4, 2)
    verdict = await fleet.fault(workload, relay.cut)
    verdict.check()
    assert all(fleet.producers[p].moves >= 1 for p in on_b1), verdict.report()
    assert b1.running  # it served its copy all along: the query committed past everything it holds
    held = {s["stream_id"]: s for s in b1.status()["streams"]}
    for sid in stream_ids(workload, on_b1):
        assert held[sid]["lag"] == 0, held[sid]


async def test_a_rolling_restart_of_every_bridge_under_load(spark: object, fleet: Fleet) -> None:
    """Each bridge in turn stopped (SIGTERM) until its producers moved on, then started again on its log, under load."""
    workload = Workload(producers=4, streams=2, events=2500, epoch=40)
    bridges = await fleet.add_bridges("b1", "b2")
    query = fleet.start_query(spark, bridge_options(bridges))
    fleet.start_producers(workload, lambda p: rotated(fleet.urls("b1", "b2"), p))
    every = stream_ids(workload, range(workload.producers))
    for bridge in bridges:
        await query.until_rows(every, query.rows_of(every) + ROWS_BEFORE_FAULT)
        fleet.producing()
        assert await bridge.stop() == 0
        await fleet.until_moved_off(bridge)
        await bridge.start()
    verdict = await fleet.verdict(workload)
    print(verdict.report())
    verdict.check()
    assert sum(p.moves for p in fleet.producers) >= workload.producers, verdict.report()


async def test_a_bridge_added_through_the_bridge_list_and_one_drained_and_removed(
    spark: object, fleet: Fleet, tmp_path: Path
) -> None:
    """Scale out: b3 joins the running query through its bridge list; b1 is drained (its producers move to b3), then removed."""
    workload = Workload(producers=4, streams=2, events=2500, epoch=40)
    b1, b2 = await fleet.add_bridges("b1", "b2")
    (b3,) = await fleet.add_bridges("b3", start=False)
    listing = tmp_path / "bridges.txt"
    write_bridge_list(listing, [b1, b2])
    query = fleet.start_query(spark, {"bridgeList": str(listing)})
    # each producer knows b3 (not there yet) as its second bridge: b1's move there when b1 drains
    fleet.start_producers(workload, lambda p: fleet.urls(*(("b1", "b3", "b2") if p % 2 == 0 else ("b2", "b3", "b1"))))
    on_b1 = range(0, 4, 2)
    every = stream_ids(workload, range(workload.producers))
    await query.until_rows(stream_ids(workload, on_b1), ROWS_BEFORE_FAULT)
    await b3.start()
    write_bridge_list(listing, [b1, b2, b3])
    fleet.producing()
    rows = query.rows_of(every)
    assert await b1.drain() == 0  # exited once everything it holds was committed
    write_bridge_list(listing, [b2, b3])
    await query.until_rows(every, rows)  # the query goes on without it
    verdict = await fleet.verdict(workload)
    print(verdict.report())
    verdict.check()
    assert all(fleet.producers[p].moves >= 1 for p in on_b1), verdict.report()
    on_b3 = {s["stream_id"]: s for s in b3.status()["streams"]}
    assert set(stream_ids(workload, on_b1)) <= set(on_b3), on_b3  # b1's producers went on there


async def test_a_standalone_cluster_query_across_two_bridges_survives_one_killed(
    cluster: StandaloneCluster, fleet: Fleet, tmp_path: Path
) -> None:
    """The cluster of test_cluster.py (executors see no bridge's disk), a driver over a bridge list, b1 SIGKILLed."""
    workload = Workload(producers=2, streams=2, events=1200, epoch=40)
    b1, b2 = await fleet.add_bridges("b1", "b2", root=cluster.hidden / tmp_path.name)
    listing = tmp_path / "bridges.txt"
    write_bridge_list(listing, [b1, b2])
    await start_driver(fleet, cluster.master_url, listing)
    fleet.start_producers(workload, lambda p: rotated(fleet.urls("b1", "b2"), p))
    verdict = await fleet.fault(workload, b1.kill)
    assert cluster.executor_namespaces_hide_the_logs()
    verdict.check()
    assert fleet.producers[0].moves >= 1, verdict.report()
