"""Reading a log back, for verdicts that compare what is stored with what was sent (not the log's counters)."""

from __future__ import annotations

from aqueduct.bridge.storage.log import DurableLog


def stored(log: DurableLog, stream_id: int) -> list[tuple[int, bytes]]:
    """(message id, payload) of a stream's durable data records, in log order (BOUNDARY markers left out)."""
    view = log.snapshot(stream_id)
    rows: list[tuple[int, bytes]] = []
    for batch in view.read(view.earliest, view.end):
        d = batch.to_pydict()
        rows += [(m, p) for m, p, b in zip(d["message_id"], d["payload"], d["boundary"], strict=True) if not b]
    return rows
