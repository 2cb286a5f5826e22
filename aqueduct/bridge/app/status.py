"""``aqueduct-bridge status``: what a log holds and how far Spark got.

Reads only what a reader in another process may read while the bridge
runs: the streams' indexes (:func:`~aqueduct.bridge.storage.view.load_streams`),
the reader's commit file (:func:`~aqueduct.bridge.storage.commits.read_committed`,
written a trigger after each micro-batch) and ``acked.json``, which the bridge rewrites
each time its listener reports a committed micro-batch. A stream's
committed offset is the larger of the two; the acked point of reference is
the one the bridge sends for that offset. A bridge that drains (or drained)
says so, and what it waits for, from its drain state file (:mod:`.drain_files`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from aqueduct.bridge.app.drain_files import read_state
from aqueduct.bridge.source.lag import consumer_lag
from aqueduct.bridge.storage.acked import read_acked_at
from aqueduct.bridge.storage.commits import read_committed
from aqueduct.bridge.storage.consumers import load_consumers, position
from aqueduct.bridge.storage.corruption import corrupt_ranges
from aqueduct.bridge.storage.view import StreamIndex, load_streams


@dataclass(frozen=True)
class LogSnapshot:
    """The indexes and ``acked.json`` read once, so the stream and consumer tables agree.

    Both tables need every index and the acked offsets; reading them once
    halves the I/O of ``status`` on a log with thousands of streams and
    keeps the two tables from describing two different moments.
    """

    streams: dict[int, StreamIndex]
    acked: dict[int, int]
    acked_at: float | None

    @classmethod
    def read(cls, log_dir: Path) -> LogSnapshot:
        streams = load_streams(log_dir)  # first: it says clearly when log_dir is no log
        return cls(streams, *read_acked_at(log_dir))


def read_status(log_dir: Path, consumer: str = "default") -> dict:
    """Per-stream positions of the log at ``log_dir`` as a JSON-ready dict."""
    if not log_dir.exists():
        raise FileNotFoundError(f"no log directory at {log_dir}")
    snapshot = LogSnapshot.read(log_dir)
    committed = read_committed(log_dir, consumer) or {}
    for sid, offset in snapshot.acked.items():
        committed[sid] = max(offset, committed.get(sid, 0))
    rows = []
    for sid, s in snapshot.streams.items():
        done = max(committed.get(sid, 0), s.earliest)
        rows.append(
            {
                "stream_id": sid,
                "stream_name": s.meta.stream_name,
                "connector": s.meta.connector,
                "earliest": s.earliest,
                "head": s.end,
                "complete": s.complete,
                "committed": done,
                "lag": max(0, s.complete - done),
                "durable_reference": s.reference,
                "acked_reference": s.reference_at(done) if done <= s.end else None,
            }
        )
    return {
        "log": str(log_dir),
        "consumer": consumer,
        "streams": rows,
        "total_records": sum(r["head"] for r in rows),
        "total_lag": sum(r["lag"] for r in rows),
        "consumers": consumer_rows(log_dir, snapshot=snapshot),
        "corrupt": [{"stream_id": sid, "records": [a, b]} for sid, a, b in corrupt_ranges(log_dir)],
        "disk": disk_space(log_dir),
        "drain": read_state(log_dir),
    }


#: below this much free space `status` warns that the log's disk is (nearly) full
LOW_DISK_BYTES = 16 * 1024 * 1024


def disk_space(log_dir: Path) -> dict:
    """Free and total bytes of the log's file system (statvfs: no write, works on a full disk).

    A full log disk does not stop the bridge: it holds producers' credits
    and retries its commit until space returns (see docs/reliability.md).
    """
    st = os.statvfs(log_dir)
    free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    return {"free_bytes": free, "total_bytes": total, "low": free < min(LOW_DISK_BYTES, total // 20 or 1)}


_COLUMNS = (
    ("stream_id", "STREAM"),
    ("stream_name", "NAME"),
    ("connector", "CONNECTOR"),
    ("head", "HEAD"),
    ("committed", "COMMITTED"),
    ("lag", "LAG"),
    ("durable_reference", "DURABLE REF"),
    ("acked_reference", "ACKED REF"),
)


def _table(rows: list[dict], columns: tuple[tuple[str, str], ...]) -> list[str]:
    cells = [[str(r[key]) for key, _ in columns] for r in rows]
    header = [title for _, title in columns]
    widths = [max(len(c) for c in col) for col in zip(header, *cells, strict=False)]
    return ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in [header, *cells]]


def format_table(report: dict) -> str:
    """A fixed-width table of :func:`read_status`'s report, plus a totals line."""
    lines = _table(report["streams"], _COLUMNS)
    lines.append(
        f"{len(report['streams'])} streams, {report['total_records']:,} records, "
        f"lag {report['total_lag']:,} (log {report['log']})"
    )
    disk = report.get("disk")
    if disk and disk["low"]:
        lines.append(
            f"log disk (nearly) full: {disk['free_bytes']:,} of {disk['total_bytes']:,} bytes free; the bridge "
            "holds producers' credits while a commit finds no room, and goes on once space returns"
        )
    drain = report.get("drain")
    if drain:
        left = (drain.get("waiting") or {}).get("line")
        lines.append(f"bridge {drain['state']}" + (f": {left}" if drain["state"] == "draining" and left else ""))
    for c in report.get("corrupt", ()):
        a, b = c["records"]
        lines.append(f"stream {c['stream_id']} records [{a}, {b}): corrupt (failed their checksum when read)")
    if report["consumers"]:
        lines += ["", format_consumers(report["consumers"])]
    return "\n".join(lines)


def consumer_rows(log_dir: Path, now_s: float | None = None, snapshot: LogSnapshot | None = None) -> list[dict]:
    """Every registered consumer of the log: role, committed records, lag, dropped or not.

    The lag is in records and bytes of complete epochs not committed yet
    (total and the worst stream) and the age of the oldest such record.
    Positions come from each consumer's commit file, which its query
    writes at the trigger after each batch, so a running consumer looks up
    to one trigger further behind than it is. For a consumer that drives
    acks, the offsets the bridge acked (``acked.json``, written as each
    batch commits) are the lower bound the stream table uses too, so an
    idle bridge shows no lag in either.
    """
    snap = LogSnapshot.read(log_dir) if snapshot is None else snapshot
    streams, acked, acked_at = snap.streams, snap.acked, snap.acked_at
    now = time.time() if now_s is None else now_s
    rows = []
    for c in load_consumers(log_dir).values():
        committed = read_committed(log_dir, c.name) or {}
        if c.acks and c.dropped is None and acked_at is not None and acked_at >= c.registered_at:
            # Acked offsets are the least every live ack consumer committed, from when they were
            # written; ones written before this consumer registered say nothing about it.
            committed = {sid: max(acked.get(sid, 0), committed.get(sid, 0)) for sid in acked.keys() | committed}
        mine = {sid: s for sid, s in streams.items() if c.reads.selects(sid, s.meta.stream_name)}
        positions = {sid: position(c, committed, sid) for sid in mine}
        rows.append(
            {
                "name": c.name,
                "acks": c.acks,
                "state": "dropped" if c.dropped else "live",
                "committed": sum(positions.values()),
                "reads": c.reads.to_json(),
                **consumer_lag(mine, positions, now).to_json(),
                "registered_at": c.registered_at,
                "dropped": c.dropped,
            }
        )
    return rows


_CONSUMER_COLUMNS = (
    ("name", "CONSUMER"),
    ("acks", "ACKS"),
    ("state", "STATE"),
    ("committed", "COMMITTED"),
    ("lag_records", "LAG"),
    ("lag_bytes", "LAG BYTES"),
    ("streams_behind", "STREAMS BEHIND"),
    ("oldest", "OLDEST UNREAD"),
)


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f} s"


def format_consumers(rows: list[dict]) -> str:
    """A fixed-width table of :func:`consumer_rows`."""
    if not rows:
        return "no consumers registered (a query registers when it first starts)"
    shown = [r | {"oldest": _age(r["oldest_unread_age_s"])} for r in rows]
    lines = _table(shown, _CONSUMER_COLUMNS)
    lines += [f"{r['name']}: dropped, {r['dropped']}" for r in rows if r["dropped"]]
    return "\n".join(lines)
