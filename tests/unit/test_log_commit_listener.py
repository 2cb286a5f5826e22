"""The commit listener's decisions, fed progress events as Spark serializes them.

The end-to-end firing under real Spark is in tests/spark; this covers which
sources count, that positions only move forward, and that only watched
queries count, each as its consumer.
"""

from __future__ import annotations

import uuid

from pyspark.sql.streaming.listener import QueryProgressEvent

from aqueduct.bridge.app.commit_listener import CommitListener

PYTHON_SOURCE = "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStream@1a2b"


def progress(
    name: str | None, *sources: tuple[str, object], query_id: str | None = None
) -> QueryProgressEvent:
    """A progress event in the JSON shape Spark 4.3 produces."""
    return QueryProgressEvent.fromJson(
        {
            "progress": {
                "id": query_id or str(uuid.uuid4()),
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


def _recording() -> tuple[list[tuple[str, dict[int, int]]], CommitListener]:
    calls: list[tuple[str, dict[int, int]]] = []
    return calls, CommitListener(lambda consumer, positions: calls.append((consumer, positions)))


def test_reports_aqueduct_offsets_once_and_only_forward() -> None:
    calls, listener = _recording()
    listener.watch("q", "default")
    kafka = ("KafkaV2[Subscribe[t]]", {"t": {"0": 5}})
    listener.onQueryProgress(progress("q", kafka, (PYTHON_SOURCE, {"1": 5, "2": 0})))
    listener.onQueryProgress(progress("q", (PYTHON_SOURCE, {"1": 5, "2": 0})))  # idle re-report
    listener.onQueryProgress(progress("q", (PYTHON_SOURCE, {"1": 5, "2": 3})))
    assert calls == [("default", {1: 5, 2: 0}), ("default", {1: 5, 2: 3})]


def test_only_watched_queries_count_each_as_its_consumer() -> None:
    calls, listener = _recording()
    query_id = str(uuid.uuid4())
    listener.watch(query_id, "orders")  # by id: a query the user started and handed over
    listener.watch("bridge", "default")  # by name: before the query exists
    listener.onQueryProgress(progress("other", (PYTHON_SOURCE, {"1": 5})))
    listener.onQueryProgress(progress("bridge", (PYTHON_SOURCE, {"1": 7})))
    listener.onQueryProgress(progress(None, (PYTHON_SOURCE, {"1": 2}), query_id=query_id))
    assert calls == [("default", {1: 7}), ("orders", {1: 2})]


def test_other_python_sources_with_foreign_offsets_are_ignored() -> None:
    calls, listener = _recording()
    listener.watch("q", "default")
    listener.onQueryProgress(progress("q", (PYTHON_SOURCE, {"partition-1": {"index": 3}})))
    assert calls == []
