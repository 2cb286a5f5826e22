"""A log writer that commits and truncates without pause, for SIGKILL tests.

``python -m tests.reliability.truncating_writer LOG`` opens (recovers) the
log, checks that each stream's retained ids run without a gap, each with
its payload, and that the last few ids it holds are refused as
duplicates, then appends batches of
consecutive ids to two streams, commits, and truncates each stream below
all but its last 50 records after every commit (small segments, so every
truncation drops files and rewrites the index). After each commit it prints
``COMMITTED <stream> <end id>`` (flushed): those ids are durable. It runs
until killed.
"""

from __future__ import annotations

import sys

from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.frames import ConnectorMessage
from tests.stored import stored

STREAMS = (1, 2)


def payload(message_id: int) -> bytes:
    """What the writer stores with each id."""
    return b"payload %d" % message_id


def check(log: DurableLog) -> None:
    """What a restart must find: contiguous ids with their payloads, and the newest refused as duplicates."""
    for sid in log.stream_ids():
        rows = stored(log, sid)
        if rows and rows != [(m, payload(m)) for m in range(rows[0][0], rows[0][0] + len(rows))]:
            sys.exit(f"stream {sid}: retained records have a gap, a repeat or a changed payload: {rows[:3]}...{rows[-3:]}")
        reference = log.durable_reference(sid)
        for m in range(max(0, reference - 5), reference):
            if not log.is_duplicate(sid, m):
                sys.exit(f"stream {sid}: id {m} was stored but is not refused as a duplicate")
        for m in range(0, min(5, reference)):  # truncated long ago: still held as received
            if not log.is_duplicate(sid, m):
                sys.exit(f"stream {sid}: id {m}, truncated, is not refused as a duplicate")


def main(path: str) -> None:
    with DurableLog(path, segment_bytes=2048) as log:
        check(log)
        print("RECOVERED " + " ".join(f"{sid}:{log.durable_reference(sid)}" for sid in log.stream_ids()), flush=True)
        for sid in STREAMS:
            log.open_stream(sid, f"s{sid}", "c/1").result()
        while True:
            for sid in STREAMS:
                start = log.durable_reference(sid)
                for m in range(start, start + 20):
                    log.append(ConnectorMessage.build(sid, payload(m), message_id=m))
            ends = log.commit()
            for sid, end in ends.items():
                print(f"COMMITTED {sid} {log.durable_reference(sid) - 1}", flush=True)
                log.truncate(sid, max(0, end - 50)).result()


if __name__ == "__main__":
    main(sys.argv[1])
