"""Spark's default trigger (no read limit) never puts part of an epoch in a micro-batch.

Without ``maxRecordsPerTrigger`` the source plans a caught-up trigger by
its shortcut (only the streams the log reloaded are looked at), the path
``test_a_micro_batch_never_holds_part_of_an_epoch`` (limited) never takes.
Here one stream's epoch is left open and durable while another stream's
whole epoch goes through Spark and is acked: the micro-batch that carried
it was planned while the open epoch's records sat in the log, so a
planner reading into open epochs puts them in that batch and the rest of
the epoch in a later one. The sink is read back: every id once, with its
payload, and each epoch in one micro-batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aqueduct.bridge.app.service import Bridge, BridgeConfig
from aqueduct.connector.producer.client import Connector, ConnectorStream
from demo.verify import verify_output
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TIMEOUT = 120.0  # only turns a hang into a failure
OPEN, OTHER = 1, 2
ROUNDS = 4


async def test_the_default_trigger_never_splits_an_epoch_left_open_across_batches(spark: Any, tmp_path: Path) -> None:
    cfg = BridgeConfig(log_dir=tmp_path / "log", tcp=("127.0.0.1", 0), output_dir=tmp_path / "out", trigger_interval=0.2)
    assert cfg.max_records_per_trigger is None  # the default: no read limit
    sent: dict[int, dict[int, bytes]] = {OPEN: {}, OTHER: {}}
    bridge = Bridge(cfg, spark=spark)
    await bridge.start()
    try:
        assert bridge.tcp_address is not None and bridge.ingest is not None
        log = bridge.ingest.log
        url = f"tcp://127.0.0.1:{bridge.tcp_address[1]}"
        async with Connector(url, program="t", instance="epochs") as conn:

            async def data(stream: ConnectorStream, n: int) -> None:
                for _ in range(n):
                    payload = b"stream %d message %d" % (stream.stream_id, stream.next_id)
                    sent[stream.stream_id][stream.next_id] = payload
                    await stream.send(payload)

            opened = await conn.stream(OPEN, "open")
            other = await conn.stream(OTHER, "other")
            await opened.send(None, boundary=True)  # a boundary stream from the start: epochs span records
            for _ in range(ROUNDS):
                await data(opened, 5)  # half an epoch ...
                half = opened.next_id
                await wait_until(lambda half=half: OPEN in log.stream_ids() and log.durable_end(OPEN) >= half,
                                 "the open epoch's records durable", TIMEOUT)  # fmt: skip
                await data(other, 3)  # ... while a whole epoch of another stream goes through Spark
                await other.send(None, boundary=True)
                await other.wait_acked(other.next_id, TIMEOUT)
                await data(opened, 5)  # the epoch's other half, and its end
                await opened.send(None, boundary=True)
            await conn.wait_all_acked(TIMEOUT)
    finally:
        await bridge.stop()
    assert bridge.failed is None
    result = verify_output(tmp_path / "out", sent)
    assert result.ok, (result.problems(), result.examples)
    assert result.split_epochs == 0 and result.rows == ROUNDS * 13
