"""The commit listener's decisions, fed progress events as Spark serializes them.

The end-to-end firing under real Spark is in tests/spark; this covers which
sources count, that positions only move forward, and the query filter.
"""

from __future__ import annotations

import uuid

from pyspark.sql.streaming.listener import QueryProgressEvent

from aqueduct.bridge.commits import CommitListener

PYTHON_SOURCE = "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStream@1a2b"


def progress(name: str | None, *sources: tuple[str, object]) -> QueryProgressEvent:
    """A progress event in the JSON shape Spark 4.3 produces."""
    return QueryProgressEvent.fromJson(
        {
            "progress": {
                "id": str(uuid.uuid4()),
                "runId": str(uuid.uuid4()),
                "name": name,
                "timestamp": "2026-01-01T00:00:00.000Z",
                "batchId": 0,
                "batchDuration": 1,
                "stateOperators": [],
                "sources": [
                    {
                        "description": desc,
                        "startOffset": None,
                        "endOffset": end,
                        "latestOffset": end,
                        "numInputRows": 1,
                        "inputRowsPerSecond": 1.0,
                        "processedRowsPerSecond": 1.0,
                    }
                    for desc, end in sources
                ],
                "sink": {"description": "FileSink", "numOutputRows": 1},
            }
        }
    )


def test_reports_aqueduct_offsets_once_and_only_forward() -> None:
    calls: list[dict[int, int]] = []
    listener = CommitListener(calls.append)
    kafka = ("KafkaV2[Subscribe[t]]", {"t": {"0": 5}})
    listener.onQueryProgress(progress("q", kafka, (PYTHON_SOURCE, {"1": 5, "2": 0})))
    listener.onQueryProgress(progress("q", (PYTHON_SOURCE, {"1": 5, "2": 0})))  # idle re-report
    listener.onQueryProgress(progress("q", (PYTHON_SOURCE, {"1": 5, "2": 3})))
    assert calls == [{1: 5, 2: 0}, {1: 5, 2: 3}]


def test_query_name_filter() -> None:
    calls: list[dict[int, int]] = []
    listener = CommitListener(calls.append, query_name="bridge")
    listener.onQueryProgress(progress("other", (PYTHON_SOURCE, {"1": 5})))
    listener.onQueryProgress(progress("bridge", (PYTHON_SOURCE, {"1": 7})))
    assert calls == [{1: 7}]


def test_other_python_sources_with_foreign_offsets_are_ignored() -> None:
    calls: list[dict[int, int]] = []
    listener = CommitListener(calls.append)
    listener.onQueryProgress(progress(None, (PYTHON_SOURCE, {"partition-1": {"index": 3}})))
    assert calls == []
