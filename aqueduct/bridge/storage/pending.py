"""Records appended since the last group commit, as columns, and one stream's sealed share of a commit.

Appends grow these lists on the bridge's event loop; a group commit seals
them (:class:`Sealed`, a copy of the stream state after them) and hands
them to the log's I/O thread, which turns them into one Arrow record batch
(:meth:`Pending.to_batch`). Columns, not rows: an append extends each list
once per batch, and Arrow builds each column in one call.
"""

from __future__ import annotations

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

    def to_batch(self, meta: StreamMeta) -> pa.RecordBatch:
        n = len(self.payload)
        f = STORED_SCHEMA.field
        columns = [
            pa.repeat(pa.scalar(spark_stream_id(meta.stream_id), pa.int64()), n),
            pa.repeat(pa.scalar(meta.stream_name, pa.string()), n),
            pa.array(self.message_id, f("message_id").type),
            pa.array(self.event_time, f("event_time").type),
            pa.array(self.key, f("key").type),
            pa.array(self.payload, f("payload").type),
            pa.repeat(pa.scalar(meta.connector, pa.string()), n),
            pa.array(self.epoch, pa.int64()),
            pa.array(self.boundary, pa.bool_()),
            pa.array(self.stable, pa.bool_()),
            pa.array(self.reference, pa.int64()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=STORED_SCHEMA)


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
