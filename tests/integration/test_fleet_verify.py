"""The fleet benchmark's exactly-once verdict reads the log back: ids and bytes, not counters."""

from __future__ import annotations

from pathlib import Path

from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.frames import ConnectorMessage
from bench.fleet import payload, per_second, verify


def fill(log: DurableLog, sid: int, records: list[tuple[int, bytes]]) -> None:
    log.open_stream(sid, f"fleet/{sid}", f"fleet/p{sid}").result()
    for mid, data in records:
        log.append(ConnectorMessage.build(sid, data, message_id=mid))


def test_the_verdict_compares_every_id_and_payload_with_what_was_sent(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log") as log:
        fill(log, 0, [(n, payload(0, n)) for n in range(3)])  # right
        fill(log, 1, [(0, payload(1, 0)), (1, b"1:1 but other bytes"), (2, payload(1, 2))])  # same ids and counts
        fill(log, 2, [(0, payload(2, 0)), (2, payload(2, 2))])  # a gap
        log.commit()
        result = verify(log, 3)
    assert (result["streams"], result["records"], result["exactly_once_bad_count"]) == (3, 8, 2)
    assert [(b["stream"], b["first_wrong_index"]) for b in result["exactly_once_bad_streams"]] == [(1, 1), (2, 1)]


def test_a_storm_verdict_holds_each_stream_to_its_own_count(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log") as log:
        fill(log, 0, [(n, payload(0, n)) for n in range(3)])
        fill(log, 1, [(n, payload(1, n)) for n in range(5)])
        log.commit()
        assert verify(log, {0: 3, 1: 5})["exactly_once_bad_count"] == 0
        short = verify(log, {0: 3, 1: 6})  # the producer sent one more than the log holds
    assert [(b["stream"], b["first_wrong_index"]) for b in short["exactly_once_bad_streams"]] == [(1, 5)]


def test_handshakes_per_second_from_a_sampled_running_total() -> None:
    # sessions started so far, sampled every 0.25 s from the kill at t=100
    samples = [(100.25, 0), (100.75, 3), (101.5, 10), (102.25, 10), (103.9, 12)]
    assert per_second(samples, 100.0, 104.0) == [3, 7, 0, 2]
