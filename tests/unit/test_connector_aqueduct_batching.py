"""How the Aqueduct transport groups frames into payloads (section 3 batching)."""

from __future__ import annotations

from aqueduct.connector.batch import MessageBatch
from aqueduct.connector.frames import EPHEMERAL, ConnectorMessage, Notify, encode
from aqueduct.connector.outbound import Mode
from aqueduct.connector.producer.aqueduct_link import MAX_BATCH_BYTES, _batches

MODES = {1: Mode.ORDERED, 2: Mode.UNRELIABLE}


def pairs(*frames):
    return [(f, encode(f)) for f in frames]


def routes(frames) -> list[tuple[int | None, int]]:
    return [(route, len(batch)) for route, batch in _batches(frames, MODES.__getitem__)]


def test_consecutive_frames_for_one_channel_share_a_payload() -> None:
    frames = pairs(
        Notify(1, "a", 0),
        Notify(2, "b", 0),
        ConnectorMessage(0, 1, 0, payload=b"x"),
        ConnectorMessage(0, 1, 1, payload=b"y"),
        ConnectorMessage(EPHEMERAL, 2, None, payload=b"e"),
        ConnectorMessage(EPHEMERAL, 2, None, payload=b"f"),
        ConnectorMessage(0, 1, 2, payload=b"z"),
    )
    assert routes(frames) == [(None, 2), (1, 2), (2, 1), (2, 1), (1, 1)]


def test_reliable_payloads_are_cut_near_the_batch_size() -> None:
    big = b"x" * (MAX_BATCH_BYTES // 3)
    frames = pairs(*(ConnectorMessage(0, 1, i, payload=big) for i in range(6)))
    assert routes(frames) == [(1, 2), (1, 2), (1, 2)]


def test_a_run_entry_goes_whole_on_its_streams_channel() -> None:
    run = MessageBatch.run(1, 3, [b"a", b"b", b"c"], [None] * 3)
    frames = [*pairs(Notify(1, "a", 0), ConnectorMessage(0, 1, 2, payload=b"x")), (run, b"".join(encode(r) for r in run))]
    assert routes(frames) == [(None, 1), (1, 2)]  # the record and the run share a payload
    big = b"x" * (MAX_BATCH_BYTES // 2)
    runs = [(MessageBatch.run(1, i, [big], [None]), encode(ConnectorMessage(0, 1, i, payload=big))) for i in range(3)]
    assert routes(runs) == [(1, 1), (1, 1), (1, 1)]
