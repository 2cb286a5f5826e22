"""A query over a bridge without Spark: the ``aqueduct`` source's reader driven as Spark drives it.

The stand-in for Spark of tests whose bridges run in processes of their own
(``aqueduct-bridge serve --ingest-only``): it plans a micro-batch, reads its
partitions (pickled on the way, as Spark ships them to executors) over the
network path only, and commits as the options' consumer, whose commits ack
the bridge's producers. What it read and committed is the sink.
"""

from __future__ import annotations

import pickle
from pathlib import Path

from pyspark.sql.streaming.datasource import ReadAllAvailable

from aqueduct.bridge.source.datasource import SPARK_STRUCT, AqueductDataSource


def bridge_options(flight: str, log: Path, consumer: str = "default") -> dict[str, str]:
    """The options that read the ingest-only bridge serving Flight at ``flight`` (its log at ``log``)."""
    tls = log / "tls"
    return {"bridge": flight, "bridgeTokenFile": str(tls / "flight.token"), "bridgeCA": str(tls / "ca.pem"),
            "consumer": consumer}  # fmt: skip


class StandInQuery:
    """One query's reader, from its initial offset on; each :meth:`micro_batch` plans, reads and commits."""

    def __init__(self, options: dict[str, str]) -> None:
        self.reader = pickle.loads(pickle.dumps(AqueductDataSource(options).streamReader(SPARK_STRUCT)))
        self.start = self.reader.initialOffset()

    def micro_batch(self) -> list[dict]:
        """Every row of the next micro-batch (all that is available), committed before returning."""
        r = self.reader
        end = r.next_end(self.start, ReadAllAvailable())
        parts = pickle.loads(pickle.dumps(r.partitions(self.start, end)))
        rows = [row for p in parts for b in r.read(p) for row in b.to_pylist()]
        r.commit(end)
        self.start = end
        return rows
