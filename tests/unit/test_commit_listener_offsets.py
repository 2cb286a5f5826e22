"""The commit listener reports what Spark committed (``endOffset``), never what it planned to.

A limited trigger (``maxRecordsPerTrigger``) leaves the source's
``latestOffset`` ahead of the batch's ``endOffset``: acking the former would
let producers forget records no sink holds yet. The progress events here
have the two apart, as Spark writes them in that case (the listener tests
beside this one keep them equal).
"""

from __future__ import annotations

import uuid

from pyspark.sql.streaming.listener import QueryProgressEvent

from aqueduct.bridge.app.commit_listener import CommitListener

PYTHON_SOURCE = "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStream@5e6f"


def limited_progress(name: str, end: dict[str, int], latest: dict[str, int]) -> QueryProgressEvent:
    return QueryProgressEvent.fromJson(
        {
            "progress": {
                "id": str(uuid.uuid4()), "runId": str(uuid.uuid4()), "name": name,
                "timestamp": "2026-01-01T00:00:00.000Z", "batchId": 3, "batchDuration": 1,
                "stateOperators": [],
                "sources": [{
                    "description": PYTHON_SOURCE, "startOffset": None, "endOffset": end,
                    "latestOffset": latest, "numInputRows": 1, "inputRowsPerSecond": 1.0,
                    "processedRowsPerSecond": 1.0,
                }],
                "sink": {"description": "ForeachBatchSink", "numOutputRows": 1},
            }
        }
    )  # fmt: skip


def test_the_committed_end_is_reported_not_the_latest_offset() -> None:
    calls: list[tuple[str, dict[int, int]]] = []
    listener = CommitListener(lambda consumer, positions: calls.append((consumer, positions)))
    listener.watch("bridge", "default")
    listener.onQueryProgress(limited_progress("bridge", {"1": 45, "2": 0}, {"1": 330, "2": 12}))
    listener.onQueryProgress(limited_progress("bridge", {"1": 90, "2": 12}, {"1": 330, "2": 12}))
    assert calls == [("default", {1: 45, 2: 0}), ("default", {1: 90, 2: 12})]
