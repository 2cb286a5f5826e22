"""``python -m bench.checksum_cost``: what the per-batch CRC32C costs the log's ingest and reads.

Two ways of running the same work, alternated in one process so both see
the same machine: **checked** (today's log: each batch's CRC32C taken when
written, verified on every read) and **unchecked** (the checksum function
replaced by one that returns None: entries are written without one and
reads skip the check, which is what the log did before checksums).

- **ingest**: ``--streams`` streams x ``--records`` records of ``--size``
  bytes appended and group-committed ``--commits`` times (append, seal,
  write, fsync, index);
- **read**: every record of the log read back as the source hands it to
  Spark (:func:`aqueduct.bridge.source.datasource.read_partition` over one slice per
  stream, each Arrow batch serialized as pyspark does to send it to the
  JVM), from the page cache.

The two modes alternate which goes first from round to round (fsync
times drift while the disk writes back the previous round).

Medians of ``--repeat`` rounds, and the checked/unchecked ratio. Progress
on stderr; ``--json`` writes the summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aqueduct.bridge.storage.segment as segment
from aqueduct.bridge.source.datasource import AqueductPartition, read_partition
from aqueduct.bridge.source.planning import Slice
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.bridge.storage.view import load_streams
from aqueduct.connector.batch import MessageBatch


def ingest(path: Path, streams: int, records: int, size: int, commits: int) -> float:
    payloads = [b"x" * size] * records
    start = time.perf_counter()
    with DurableLog(path) as log:
        for sid in range(streams):
            log.open_stream(sid, f"s{sid}", "bench/1")
        for c in range(commits):
            for sid in range(streams):
                log.append(MessageBatch.run(sid, c * records, payloads, [None] * records))
            log.commit()
    return time.perf_counter() - start


def read(path: Path) -> float:
    slices = [
        Slice(str(s.directory), sid, s.earliest, s.end, tuple(s.entries), 0) for sid, s in load_streams(path).items()
    ]
    start = time.perf_counter()
    for batch in read_partition(AqueductPartition(tuple(slices))):
        batch.serialize()  # what pyspark does with each batch: bytes for the JVM
    return time.perf_counter() - start


def unchecked() -> Callable[[], None]:
    """Switch checksums off (the log before them); returns the function that switches them back."""
    real = segment.checksum
    segment.checksum = lambda data: None  # type: ignore[assignment,return-value]

    def restore() -> None:
        segment.checksum = real

    return restore


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0].strip("`: "))
    ap.add_argument("--streams", type=int, default=20)
    ap.add_argument("--records", type=int, default=2000, help="records per stream and commit")
    ap.add_argument("--size", type=int, default=200, help="payload bytes")
    ap.add_argument("--commits", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", type=Path, help="write the summary here")
    args = ap.parse_args(argv)
    times: dict[str, list[float]] = {k: [] for k in ("ingest_checked", "ingest_unchecked", "read_checked", "read_unchecked")}
    with tempfile.TemporaryDirectory(prefix="aqueduct-crc-bench-") as tmp:
        for r in range(args.repeat):
            for mode in ("checked", "unchecked")[:: 1 if r % 2 else -1]:
                restore = unchecked() if mode == "unchecked" else (lambda: None)
                try:
                    path = Path(tmp) / f"{mode}-{r}"
                    times[f"ingest_{mode}"].append(ingest(path, args.streams, args.records, args.size, args.commits))
                    read(path)  # warm the page cache: both modes read from memory
                    times[f"read_{mode}"].append(read(path))
                finally:
                    restore()
            print(f"round {r + 1}/{args.repeat} done", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    mb = args.streams * args.records * args.commits * args.size / 1e6
    summary: dict[str, Any] = {
        "payload_mb": mb,
        "median_s": med,
        "ingest_ratio": med["ingest_checked"] / med["ingest_unchecked"],
        "read_ratio": med["read_checked"] / med["read_unchecked"],
        "args": {k: v for k, v in vars(args).items() if k != "json"},
    }
    print(
        f"{mb:.0f} MB of payloads: ingest {med['ingest_unchecked']:.3f} s -> {med['ingest_checked']:.3f} s "
        f"(x{summary['ingest_ratio']:.3f}), read {med['read_unchecked'] * 1e3:.1f} ms -> "
        f"{med['read_checked'] * 1e3:.1f} ms (x{summary['read_ratio']:.3f})"
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
