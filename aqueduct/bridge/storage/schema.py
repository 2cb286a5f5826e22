"""Arrow schemas of the durable log and of the rows the Spark source emits.

The log stores, per record, the eight columns Spark sees plus three private
columns the bridge needs to answer questions about positions without
reading anything else:

- ``boundary``: the record is a BOUNDARY marker (it closes an epoch and is
  never emitted to Spark: it carries no payload, its effect is the epoch
  column of the records before it);
- ``stable``: the record has a stable message id (not EPHEMERAL, not
  UNSTABLE_REFERENCE): only those count for deduplication after a restart;
- ``reference``: the stream's point of reference *after* this record, so
  that "which point of reference covers every record below log offset X"
  is a single column lookup (:meth:`DurableLog.reference_at`).

The Spark-visible types must equal what pyspark derives from the
source's ``StructType`` (``timestamp[us, tz=UTC]``, ``string`` and not
``large_string``, the same nullability), because pyspark refuses Arrow
batches whose schema differs from the declared one.
"""

from __future__ import annotations

import pyarrow as pa

#: Columns emitted to Spark, in order, with their Arrow types and nullability.
#: message_id is absent for EPHEMERAL messages, event_time and key are optional
#: in MESSAGE frames; everything else is always present.
SPARK_FIELDS: tuple[pa.Field, ...] = (
    pa.field("stream_id", pa.int64(), nullable=False),
    pa.field("stream_name", pa.string(), nullable=False),
    pa.field("message_id", pa.int64(), nullable=True),
    pa.field("event_time", pa.timestamp("us", tz="UTC"), nullable=True),
    pa.field("key", pa.binary(), nullable=True),
    pa.field("payload", pa.binary(), nullable=False),
    pa.field("connector", pa.string(), nullable=False),
    pa.field("epoch", pa.int64(), nullable=False),
)

SPARK_SCHEMA: pa.Schema = pa.schema(SPARK_FIELDS)
SPARK_COLUMNS: tuple[str, ...] = tuple(f.name for f in SPARK_FIELDS)

#: What a log segment stores: the Spark columns plus the private ones.
STORED_SCHEMA: pa.Schema = pa.schema(
    [
        *SPARK_FIELDS,
        pa.field("boundary", pa.bool_(), nullable=False),
        pa.field("stable", pa.bool_(), nullable=False),
        pa.field("reference", pa.int64(), nullable=False),
    ]
)

#: Largest message id/event time the log accepts: Spark's ``long`` is signed 64-bit.
MAX_INT64 = (1 << 63) - 1

#: Largest stream id the log accepts: the whole unsigned 64-bit range of the wire.
MAX_UINT64 = (1 << 64) - 1


def spark_stream_id(stream_id: int) -> int:
    """The ``stream_id`` column's value for a stream id: its 64 bits read as a signed long.

    Stream ids are unsigned 64-bit numbers on the wire (Wallaroo's released
    client takes them from a name's SHA-256, so half are 2^63 or more);
    Spark has only a signed long. Two's complement keeps every id distinct
    and reversible: ids below 2^63 are themselves, the others come out
    negative (``id - 2**64``); ``stream_id + 2**64`` (or ``& 0xFFFF_FFFF_FFFF_FFFF``
    on the 64 bits) gives the wire id back.
    """
    return stream_id - (1 << 64) if stream_id > MAX_INT64 else stream_id
