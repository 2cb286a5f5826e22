"""The ingest hands each session batch to the log in one call and counts what the log's mask says.

A connector that reconnects while its old session's records are buffered
but not yet durable resends them on the new session: that session was told
(OK) only the durable point, so it accepts them, and only the log, which
holds every session's records, can drop them. Its ``accepted`` mask is
what the ingest counts as stored and as duplicates; every record's credit
still comes back after the group commit.
"""

from __future__ import annotations

from pathlib import Path

from aqueduct.bridge.ingest.service import Ingest
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.frames import PROTOCOL_VERSION, ConnectorMessage, Hello, Notify, encode
from aqueduct.connector.worker.server import WorkerPeer
from aqueduct.connector.worker_session import WorkerConfig
from aqueduct.wire.modes import Mode


async def test_records_buffered_by_one_session_are_dropped_by_the_log_on_the_next(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log") as log:
        ingest = Ingest(log)

        async def send(data: bytes) -> None:
            pass

        old, new = (WorkerPeer(ingest, WorkerConfig(initial_credits=64), send, lambda: None) for _ in range(2))
        hello = [Hello(PROTOCOL_VERSION, b"", "p", "i"), Notify(1, "s", 0)]
        keyed = ConnectorMessage.build(1, b"k5", message_id=5, key=b"k")
        await old.receive_payload(
            b"".join(map(encode, [*hello, *(ConnectorMessage(0, 1, m, payload=b"x") for m in range(5))])), mode=Mode.ORDERED
        )
        assert ingest.counters.messages == 5 and log.durable_end(1) == 0  # buffered, not durable
        # The connector reconnects before the group commit and resends from the durable point.
        await new.receive_payload(b"".join(map(encode, hello)), mode=Mode.ORDERED)
        resend = b"".join(encode(ConnectorMessage(0, 1, m, payload=b"x")) for m in range(5)) + encode(keyed)
        await new.receive_payload(resend, mode=Mode.ORDERED, channel_stream=1)
        assert (ingest.counters.messages, ingest.counters.duplicates) == (6, 5)
        await ingest.group_commit()
        assert log.durable_end(1) == 6 and log.durable_reference(1) == 6
        # Every record's credit comes back after the group commit, the duplicates' too.
        assert new.session._credits == 64  # 1 for the NOTIFY (back at once), 6 for the records
