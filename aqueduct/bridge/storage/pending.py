"""Records appended since the last group commit, as columns, and one stream's sealed share of a commit.

Appends grow these lists on the bridge's event loop; a group commit seals
them (:class:`Sealed`, a copy of the stream state after them) and hands
them to the log's I/O thread, which turns every stream's share into an
Arrow record batch of its own (:func:`record_batches`). Columns, not rows:
an append extends each list once per batch, and Arrow builds each column
in one call, for many streams at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from aqueduct.bridge.storage.schema import STORED_SCHEMA, spark_stream_id
from aqueduct.bridge.storage.view import StreamMeta


@dataclass
class Pending:
    """Records appended since the last commit, held as column lists."""

    message_id: list[int | None] = field(default_factory=list)
    event_time: list[int | None] = field(default_factory=list)
    key: list[bytes | None] = field(default_factory=list)
    payload: list[bytes] = field(default_factory=list)
    epoch: list[int] = field(default_factory=list)
    boundary: list[bool] = field(default_factory=list)
    stable: list[bool] = field(default_factory=list)
    reference: list[int] = field(default_factory=list)
    #: The stream's point of reference before the first of these records.
    reference_before: int = 0


@dataclass(frozen=True, slots=True)
class Sealed:
    """One stream's share of a group commit, taken on the appending thread.

    The I/O thread needs the stream state *after* these records for the
    index entry; by the time it writes, the appending thread may have moved
    the live state on, so it is copied here.
    """

    pending: Pending
    meta: StreamMeta  # as when sealed: a re-NOTIFY may rename the stream meanwhile
    first_offset: int
    reference_after: int
    complete_after: int
    next_epoch: int
    uses_boundaries: bool
    written_at_us: int


#: Payload bytes of the streams whose columns are built into one record batch at most (well below
#: the 2 GiB an Arrow binary column holds; one stream's share is never split).
BUILT_TOGETHER_BYTES = 64 * 1024 * 1024


def record_batches(parts: Sequence[Sealed]) -> Iterator[pa.RecordBatch]:
    """Each sealed share's records as a record batch of its own, in order, built for many streams at once.

    Building an Arrow array from a list costs tens of microseconds of
    Python whatever its length, and holds the GIL that the bridge's event
    loop needs: built per stream (11 columns each), a group commit over
    2,000 streams of a few records spent ~0.5 s there (issue 41's reconnect
    storms). Here the columns of streams holding up to
    :data:`BUILT_TOGETHER_BYTES` are concatenated and built once, and each
    stream's batch is a zero-copy slice of the whole (serialized, a slice
    holds only its own rows: the segment format is unchanged).
    """
    start, size = 0, 0
    for i, part in enumerate(parts):
        nbytes = sum(map(len, part.pending.payload))
        if i > start and size + nbytes > BUILT_TOGETHER_BYTES:
            yield from _built_together(parts[start:i])
            start, size = i, 0
        size += nbytes
    if start < len(parts):
        yield from _built_together(parts[start:])


def _built_together(parts: Sequence[Sealed]) -> Iterator[pa.RecordBatch]:
    """One record batch of every share's records, sliced back into one batch per share."""
    stream_id: list[int] = []
    stream_name: list[str] = []
    connector: list[str] = []
    message_id: list[int | None] = []
    event_time: list[int | None] = []
    key: list[bytes | None] = []
    payload: list[bytes] = []
    epoch: list[int] = []
    boundary: list[bool] = []
    stable: list[bool] = []
    reference: list[int] = []
    for part in parts:
        p, meta = part.pending, part.meta
        n = len(p.payload)
        stream_id += [spark_stream_id(meta.stream_id)] * n
        stream_name += [meta.stream_name] * n
        connector += [meta.connector] * n
        message_id += p.message_id
        event_time += p.event_time
        key += p.key
        payload += p.payload
        epoch += p.epoch
        boundary += p.boundary
        stable += p.stable
        reference += p.reference
    f = STORED_SCHEMA.field
    whole = pa.RecordBatch.from_arrays(
        [
            pa.array(stream_id, pa.int64()),
            pa.array(stream_name, pa.string()),
            pa.array(message_id, f("message_id").type),
            pa.array(event_time, f("event_time").type),
            pa.array(key, f("key").type),
            pa.array(payload, f("payload").type),
            pa.array(connector, pa.string()),
            pa.array(epoch, pa.int64()),
            pa.array(boundary, pa.bool_()),
            pa.array(stable, pa.bool_()),
            pa.array(reference, pa.int64()),
        ],
        schema=STORED_SCHEMA,
    )
    at = 0
    for part in parts:
        n = len(part.pending.payload)
        yield whole.slice(at, n)
        at += n
