"""The stalled-producer rule over a real log: connected producers whose oldest unacked record is too old."""

from __future__ import annotations

from pathlib import Path

from aqueduct.bridge.app.stalled import oldest_unacked_us, stalled_producers
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.frames import ConnectorMessage

AFTER = 60.0


def count(log: DurableLog, connected: set[str], acked: dict[int, int], now: float) -> int:
    sids = log.stream_ids()
    streams = {sid: log.snapshot(sid) for sid in sids}
    return stalled_producers(streams, {sid: log.connector_of(sid) for sid in sids}, connected, acked, now, AFTER)


def test_a_connected_producer_stalls_once_its_oldest_unacked_record_is_older_than_the_threshold(
    tmp_path: Path,
) -> None:
    with DurableLog(tmp_path / "log") as log:
        for sid, owner in ((1, "shop/a"), (2, "shop/a"), (3, "shop/b"), (4, "shop/gone")):
            log.open_stream(sid, f"s{sid}", owner).result()
        for sid in (1, 3, 4):  # two records each, durable at t=1000
            for i in range(2):
                log.append(ConnectorMessage.build(sid, b"x", message_id=i))
        log.commit(now=1000.0)
        log.append(ConnectorMessage.build(2, b"y", message_id=0))
        log.commit(now=1030.0)  # shop/a's second stream: durable at t=1030
        connected = {"shop/a", "shop/b"}  # shop/gone has no session: its acks wait for it anyway

        assert count(log, connected, {}, now=1060.0) == 0  # 60 s is not longer than the threshold
        assert count(log, connected, {}, now=1060.001) == 2
        assert count(log, connected, {1: 2}, now=1080.0) == 1  # shop/a's old record acked, the newer not yet 60 s
        assert count(log, connected, {1: 2}, now=1090.001) == 2
        assert count(log, connected, {1: 2, 2: 1, 3: 1}, now=1090.001) == 1  # shop/b still holds an unacked one
        assert count(log, connected, {1: 2, 2: 1, 3: 2}, now=9999.0) == 0  # everything acked
        assert count(log, set(), {}, now=9999.0) == 0  # nobody connected


def test_the_oldest_unacked_record_is_the_first_above_the_acked_offset(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log") as log:
        log.open_stream(1, "s", "p/i").result()
        for i, at in enumerate((10.0, 20.0)):
            log.append(ConnectorMessage.build(1, b"", message_id=i))
            log.commit(now=at)
        s = log.snapshot(1)
        assert [oldest_unacked_us(s, acked) for acked in (0, 1, 2)] == [10_000_000, 20_000_000, None]
