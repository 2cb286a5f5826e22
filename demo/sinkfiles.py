"""Read what Spark's Parquet file sink committed, and nothing else.

Spark's file sink is exactly-once through its metadata log
(``<output>/_spark_metadata/<batch>``, compacted every few batches into
``<batch>.compact``): a Parquet file counts only once a log entry names it.
A crash between writing a part file and logging it leaves a stray file that
Spark's own reader ignores, so any check of the output must ignore it too;
listing the directory would count those rows twice.

Each delta file belongs to one micro-batch, which is what lets the verifier
check that no batch holds part of an epoch. Entries only found in a compact
file (delta already cleaned up, by default after 10 minutes) keep their order
but lose their batch number (``batch`` is ``None``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq

METADATA_DIR = "_spark_metadata"


@dataclass(frozen=True, slots=True)
class SinkFile:
    """One committed Parquet file and the micro-batch that committed it (if known)."""

    path: Path
    batch: int | None


class SinkLogError(ValueError):
    """The sink's metadata log is not in the format Spark writes."""


def _entries(log_file: Path) -> list[dict]:
    lines = log_file.read_text().splitlines()
    if not lines or lines[0] != "v1":
        raise SinkLogError(f"{log_file}: metadata log file must start with 'v1'")
    return [json.loads(line) for line in lines[1:] if line.strip()]


def _local_path(uri: str) -> Path:
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        raise SinkLogError(f"only local file-sink output can be read here, not {uri}")
    return Path(unquote(parsed.path))


def committed_files(output_dir: str | Path) -> list[SinkFile]:
    """Every Parquet file the sink committed, in commit order.

    Returns ``[]`` if the sink has not committed anything yet.
    """
    log_dir = Path(output_dir) / METADATA_DIR
    if not log_dir.is_dir():
        return []
    batches: dict[int, Path] = {}
    compacts: dict[int, Path] = {}
    for f in log_dir.iterdir():
        stem, _, suffix = f.name.partition(".")
        if not stem.isdigit() or suffix not in ("", "compact"):
            continue  # Spark's temporary files (".0.crc", ".tmp")
        (compacts if suffix else batches)[int(stem)] = f
    start = 0
    result: dict[str, SinkFile] = {}
    if compacts:
        last_compact = max(compacts)
        for entry in _entries(compacts[last_compact]):
            result[entry["path"]] = SinkFile(_local_path(entry["path"]), None)
        start = last_compact + 1
    # Deltas that the compact file already covers still tell us batch numbers.
    for batch in sorted(batches):
        for entry in _entries(batches[batch]):
            if batch >= start or entry["path"] in result:
                result[entry["path"]] = SinkFile(_local_path(entry["path"]), batch)
    deleted = {
        e["path"]
        for b in sorted(batches)
        if b >= start
        for e in _entries(batches[b])
        if e.get("action") == "delete"
    }
    return [f for p, f in result.items() if p not in deleted]


def read_committed(output_dir: str | Path) -> pa.Table | None:
    """All committed rows, with a ``_batch`` column (null where unknown); ``None`` if empty."""
    tables = []
    for f in committed_files(output_dir):
        t = pq.read_table(f.path)
        tables.append(t.append_column("_batch", pa.array([f.batch] * t.num_rows, pa.int64())))
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="default")
