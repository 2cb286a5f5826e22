"""One stream's records as columns: the one unit the record path hands from stop to stop.

The worker session emits a batch, the bridge's ingest passes it on and the
durable log appends it, one call each; a record on its own is the batch of
one. Holding columns rather than an object per record is what keeps the
busy path per batch: the decoder appends each payload (and event time) to
the batch it is building and nothing else is made per record.

A batch comes in two shapes with one meaning:

* a **run** (``flags is None``): stable data records of consecutive ids
  from :attr:`~RecordColumns.first_id` on, each with flag 0 or EVENT_TIME
  (where its event time is set), no key. What a busy stream carries; every
  stop takes it whole.
* **general** columns: a flag, an id (None when EPHEMERAL) and a key per
  record, for everything else (EOS, BOUNDARY, keys, gaps in the ids).

The connector's worker side hands over its subclass,
:class:`~aqueduct.connector.batch.MessageBatch`, which is also a sequence
of its MESSAGE frames; the log needs only the columns, and of a lone record
only its fields (:class:`RecordFields`), so it depends on this module and not on
the connector's wire format.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from aqueduct.records.flags import EVENT_TIME

__all__ = ["RecordColumns", "RecordFields"]

C = TypeVar("C", bound="RecordColumns")


class RecordFields(Protocol):
    """A record's fields, whatever carries them (the connector's MESSAGE frame, say).

    Optional fields are present exactly when the flags say so: ``message_id``
    unless EPHEMERAL, ``event_time`` with EVENT_TIME, ``key`` with KEY, and
    ``payload`` unless BOUNDARY.
    """

    flags: int
    stream_id: int
    message_id: int | None
    event_time: int | None
    key: bytes | None
    payload: bytes | None


class RecordColumns:
    """Consecutive records of one stream, held as columns (see the module docstring)."""

    __slots__ = ("stream_id", "first_id", "payloads", "event_times", "flags", "ids", "keys")

    def __init__(
        self,
        stream_id: int,
        first_id: int,
        payloads: list[bytes | None],
        event_times: list[int | None],
        flags: list[int] | None = None,
        ids: list[int | None] | None = None,
        keys: list[bytes | None] | None = None,
    ) -> None:
        n = len(payloads)
        name = type(self).__name__
        if len(event_times) != n or (flags is not None and not (len(flags) == len(ids or ()) == len(keys or ()) == n)):
            raise ValueError(f"{name}: columns of unequal length ({n} payloads)")
        if (flags is None) != (ids is None) or (flags is None) != (keys is None):
            raise ValueError(f"{name}: flags, ids and keys come together (or none: a run)")
        self.stream_id = stream_id
        self.first_id = first_id  # a run's first id (general columns: unused, 0)
        self.payloads = payloads
        self.event_times = event_times
        self.flags = flags  # None: a run
        self.ids = ids
        self.keys = keys

    # ------------------------------------------------------------ making one

    @classmethod
    def run(cls: type[C], stream_id: int, first_id: int, payloads: list[bytes], event_times: list[int | None]) -> C:
        """A run: ids ``first_id ..``, one payload and event time (or None) each."""
        return cls(stream_id, first_id, payloads, event_times)  # type: ignore[arg-type]

    @classmethod
    def general(cls: type[C], records: Sequence[RecordFields]) -> C:
        """General columns of one stream's ``records`` (the caller knows they are one stream's), run or not.

        What the worker session makes of the MESSAGEs its decoder did not
        gather into runs, a chunk's consecutive ones of a stream at once; and
        what the log makes of a lone record.
        """
        batch = cls.__new__(cls)
        batch.stream_id, batch.first_id = records[0].stream_id, 0
        batch.payloads = [r.payload for r in records]
        batch.event_times = [r.event_time for r in records]
        batch.flags = [r.flags for r in records]
        batch.ids = [r.message_id for r in records]
        batch.keys = [r.key for r in records]
        return batch

    # ------------------------------------------------------------ reading it

    @property
    def is_run(self) -> bool:
        """Stable data records with consecutive ids (the busy path)."""
        return self.flags is None

    @property
    def stop_id(self) -> int:
        """A run's id after its last."""
        return self.first_id + len(self.payloads)

    def columns(self) -> tuple[list[int], Sequence[int | None], list[bytes | None]]:
        """Flags, ids and keys, one per record, whichever shape (a run's are made here)."""
        if self.flags is not None:
            return self.flags, self.ids, self.keys  # type: ignore[return-value]
        flags = [0 if t is None else EVENT_TIME for t in self.event_times]
        return flags, range(self.first_id, self.stop_id), [None] * len(self.payloads)

    def payload_bytes(self) -> int:
        """Bytes of payloads and keys: what a memory budget counts."""
        size = sum(map(len, self.payloads)) if self.flags is None else sum(len(p or b"") for p in self.payloads)  # type: ignore[arg-type]
        return size if self.keys is None else size + sum(len(k or b"") for k in self.keys)

    # ------------------------------------------------------------ growing it

    def extend(self, other: RecordColumns) -> None:
        """Append ``other``, later records of the same stream (a run stays one if ``other`` continues it).

        The columns grow in place (a session gathers a chunk's batches of one
        stream into one); a run that ``other`` does not continue becomes
        general columns first.
        """
        if other.stream_id != self.stream_id:
            raise ValueError(f"batch of stream {other.stream_id} does not continue stream {self.stream_id}")
        if self.flags is None:
            if other.flags is None and other.first_id == self.stop_id:
                self.payloads += other.payloads
                self.event_times += other.event_times
                return
            flags, ids, keys = self.columns()
            self.flags, self.ids, self.keys, self.first_id = flags, list(ids), keys, 0
        more_flags, more_ids, more_keys = other.columns()
        self.flags += more_flags
        self.ids += more_ids  # type: ignore[operator]
        self.keys += more_keys  # type: ignore[operator]
        self.payloads += other.payloads
        self.event_times += other.event_times

    def select(self: C, rows: Sequence[int]) -> C:
        """The batch of these rows (ascending): a run stays one if they are consecutive."""
        if len(rows) == len(self.payloads):
            return self
        payloads, times, cls = self.payloads, self.event_times, type(self)
        if self.flags is None and rows and rows[-1] - rows[0] == len(rows) - 1:
            a, b = rows[0], rows[-1] + 1
            return cls(self.stream_id, self.first_id + a, payloads[a:b], times[a:b])
        flags, ids, keys = self.columns()
        return cls(
            self.stream_id, 0, [payloads[i] for i in rows], [times[i] for i in rows],
            [flags[i] for i in rows], [ids[i] for i in rows], [keys[i] for i in rows],
        )  # fmt: skip

    def __len__(self) -> int:
        return len(self.payloads)

    def __repr__(self) -> str:
        if self.flags is None:
            return f"{type(self).__name__}(stream {self.stream_id}, run of ids {self.first_id}..{self.stop_id - 1})"
        return f"{type(self).__name__}(stream {self.stream_id}, {len(self)} records)"
