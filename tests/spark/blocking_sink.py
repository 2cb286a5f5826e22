"""A ``--pipeline`` for ``aqueduct-bridge serve`` whose ``foreachBatch`` sink can be held mid-batch.

``build(df)`` returns a ``foreachBatch`` writer (no trigger: Spark's
default, the source's unlimited path) that writes each micro-batch to
``$AQUEDUCT_TEST_SINK/batch-<id>.jsonl`` (an atomic rename, so a batch run
again after a crash overwrites its own file: exactly once by batch id),
then, while the file ``hold`` exists in that directory, blocks before
returning, i.e. before Spark can commit the batch. ``entered-<id>-<pid>``
says which process is inside which batch.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

HOLD_LIMIT = 600.0  # seconds a batch stays held at most: only turns a hang into a failure


def sink_dir() -> Path:
    return Path(os.environ["AQUEDUCT_TEST_SINK"])


def write_batch(df: Any, batch_id: int) -> None:
    out = sink_dir()
    rows = df.select("stream_id", "message_id", "epoch", "payload").collect()
    lines = [
        json.dumps({"stream_id": r.stream_id, "message_id": r.message_id, "epoch": r.epoch,
                    "payload": bytes(r.payload).hex(), "batch": batch_id})
        for r in rows
    ]  # fmt: skip
    tmp = out / f".batch-{batch_id}.tmp"
    tmp.write_text("".join(line + "\n" for line in lines))
    os.replace(tmp, out / f"batch-{batch_id:05d}.jsonl")
    (out / f"entered-{batch_id}-{os.getpid()}").touch()
    deadline = time.monotonic() + HOLD_LIMIT
    while (out / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def build(df: Any) -> Any:
    return df.writeStream.foreachBatch(write_batch)


def read_rows(out: Path) -> list[dict]:
    """Every row the sink holds, one dict per row (payload as bytes)."""
    rows = []
    for path in sorted(out.glob("batch-*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            rows.append(row | {"payload": bytes.fromhex(row["payload"])})
    return rows
