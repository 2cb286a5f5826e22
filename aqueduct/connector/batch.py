"""One stream's MESSAGEs as columns: the one unit that crosses the worker side.

The worker session emits a :class:`MessageBatch`
(:class:`~aqueduct.connector.events.RecordsAccepted`), the bridge's ingest
passes it on and the durable log appends it, one call each; a message on its
own is the batch of one. Holding columns rather than a
:class:`~aqueduct.connector.frames.Message` per record is what keeps the
busy path per batch: the decoder appends each payload (and event time) to
the batch it is building and nothing else is made per record.

A batch comes in two shapes with one meaning:

* a **run** (``flags is None``): stable data records of consecutive ids
  from :attr:`first_id` on, each with flag 0 or EVENT_TIME (where its
  event time is set), no key. What a busy stream carries; every stop takes
  it whole.
* **general** columns: a flag, an id (None when EPHEMERAL) and a key per
  record, for everything else (EOS, BOUNDARY, keys, gaps in the ids).

:attr:`accepted` is the verdict of the log's deduplication (None: every
record was new), written by :meth:`DurableLog.append
<aqueduct.bridge.storage.log.DurableLog.append>` so its caller counts what
was stored without a second pass of the rules.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

from aqueduct.connector.frames import BOUNDARY, EVENT_TIME, MESSAGE_TAG
from aqueduct.connector.frames import ConnectorMessage as Message

__all__ = ["MessageBatch"]

_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF
#: The largest payload a MESSAGE frame's u32 length holds beside its longest head.
_MAX_PAYLOAD = 0xFFFF_FFFF - 31


class MessageBatch(Sequence[Message]):
    """Consecutive MESSAGEs of one stream, held as columns (see the module docstring).

    It is a sequence of :class:`Message` (each built on access, for sinks and
    tests that want them one by one) and equals any sequence of the same
    messages, whichever shape either side has.
    """

    __slots__ = ("stream_id", "first_id", "payloads", "event_times", "flags", "ids", "keys", "accepted")
    __hash__ = None  # type: ignore[assignment]  # mutable, equal to lists
    TAG = MESSAGE_TAG  # what it is made of, for routing and error reasons
    NAME = "MESSAGE"

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
        if len(event_times) != n or (flags is not None and not (len(flags) == len(ids or ()) == len(keys or ()) == n)):
            raise ValueError(f"MessageBatch: columns of unequal length ({n} payloads)")
        if (flags is None) != (ids is None) or (flags is None) != (keys is None):
            raise ValueError("MessageBatch: flags, ids and keys come together (or none: a run)")
        self.stream_id = stream_id
        self.first_id = first_id  # a run's first id (general columns: unused, 0)
        self.payloads = payloads
        self.event_times = event_times
        self.flags = flags  # None: a run
        self.ids = ids
        self.keys = keys
        #: the log's verdict per record, True if stored (None: all of them)
        self.accepted: list[bool] | None = None

    # ------------------------------------------------------------ making one

    @classmethod
    def run(
        cls, stream_id: int, first_id: int, payloads: list[bytes], event_times: list[int | None]
    ) -> MessageBatch:
        """A run: ids ``first_id ..``, one payload and event time (or None) each."""
        return cls(stream_id, first_id, payloads, event_times)  # type: ignore[arg-type]

    @classmethod
    def of(cls, messages: Sequence[Message]) -> MessageBatch:
        """The batch of one stream's ``messages`` (one, or many): a run if they form one.

        Raises ValueError for messages of several streams or none.
        """
        if type(messages) is cls:
            return messages
        if not messages:
            raise ValueError("MessageBatch: no messages")
        run = cls.run_of(messages)
        if run is not None:
            return run
        stream_id = messages[0].stream_id
        if any(m.stream_id != stream_id for m in messages):
            raise ValueError("MessageBatch: messages of several streams")
        return cls.general(messages)

    @classmethod
    def run_of(cls, messages: Sequence[Message]) -> MessageBatch | None:
        """``messages`` as a run, if they are one (see :attr:`is_run`); else None.

        The one definition of a run on the sending side: a connector session
        sends a run in one step (:meth:`ConnectorSession.send_messages
        <aqueduct.connector.connector_session.ConnectorSession.send_messages>`),
        so a run also holds only values its frames can carry (ids, stream id
        and event times in 0..2**64-1).
        """
        if not messages or not _is_run(messages):
            return None
        first = messages[0]
        return cls(
            first.stream_id, first.message_id, [m.payload for m in messages], [m.event_time for m in messages]  # type: ignore[arg-type, misc]
        )

    @classmethod
    def general(cls, messages: Sequence[Message]) -> MessageBatch:
        """General columns of one stream's ``messages`` (the caller knows they are one stream's), run or not.

        What the worker session makes of the MESSAGEs its decoder did not
        gather into runs, a chunk's consecutive ones of a stream at once.
        """
        batch = cls.__new__(cls)
        batch.stream_id, batch.first_id, batch.accepted = messages[0].stream_id, 0, None
        batch.payloads = [m.payload for m in messages]
        batch.event_times = [m.event_time for m in messages]
        batch.flags = [m.flags for m in messages]
        batch.ids = [m.message_id for m in messages]
        batch.keys = [m.key for m in messages]
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
        size = sum(map(len, self.payloads)) if self.flags is None else sum(len(p or b"") for p in self.payloads)
        return size if self.keys is None else size + sum(len(k or b"") for k in self.keys)

    def stored(self) -> tuple[int, int]:
        """After the log's append: (data records stored, records it dropped as duplicates).

        Boundaries are not data; a run has none.
        """
        accepted, flags = self.accepted, self.flags
        if accepted is None:
            if flags is None:
                return len(self.payloads), 0
            return sum(1 for f in flags if not f & BOUNDARY), 0
        if flags is None:
            kept = sum(accepted)
        else:
            kept = sum(1 for ok, f in zip(accepted, flags, strict=True) if ok and not f & BOUNDARY)
        return kept, accepted.count(False)

    # ------------------------------------------------------------ growing it

    def extend(self, other: MessageBatch) -> None:
        """Append ``other``, later messages of the same stream (a run stays one if ``other`` continues it).

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

    def select(self, rows: Sequence[int]) -> MessageBatch:
        """The batch of these rows (ascending): a run stays one if they are consecutive."""
        if len(rows) == len(self.payloads):
            return self
        payloads, times = self.payloads, self.event_times
        if self.flags is None and rows and rows[-1] - rows[0] == len(rows) - 1:
            a, b = rows[0], rows[-1] + 1
            return MessageBatch(self.stream_id, self.first_id + a, payloads[a:b], times[a:b])
        flags, ids, keys = self.columns()
        return MessageBatch(
            self.stream_id, 0, [payloads[i] for i in rows], [times[i] for i in rows],
            [flags[i] for i in rows], [ids[i] for i in rows], [keys[i] for i in rows],
        )  # fmt: skip

    # ------------------------------------------------------------ Sequence[Message]

    def __len__(self) -> int:
        return len(self.payloads)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self.payloads)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("MessageBatch index out of range")
        t = self.event_times[index]
        if self.flags is None:
            return Message(0 if t is None else EVENT_TIME, self.stream_id, self.first_id + index, t, None, self.payloads[index])
        return Message(self.flags[index], self.stream_id, self.ids[index], t, self.keys[index], self.payloads[index])  # type: ignore[index]

    def __iter__(self) -> Iterator[Message]:
        stream_id, (flags, ids, keys) = self.stream_id, self.columns()
        for f, i, t, k, p in zip(flags, ids, self.event_times, keys, self.payloads, strict=True):
            yield Message(f, stream_id, i, t, k, p)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __repr__(self) -> str:
        if self.flags is None:
            return f"MessageBatch(stream {self.stream_id}, run of ids {self.first_id}..{self.stop_id - 1})"
        return f"MessageBatch(stream {self.stream_id}, {len(self)} messages)"


def _is_run(messages: Sequence[Message]) -> bool:
    """True if ``messages`` are one stream's stable data records (no flag but EVENT_TIME,
    matching its time), with consecutive ids, no key, a payload, and every value a frame
    can carry (a stream id, ids and event times in 0..2**64-1; a length in 32 bits): a run."""
    first = messages[0]
    start, stream_id = first.message_id, first.stream_id
    if (
        type(start) is not int
        or type(stream_id) is not int
        or not 0 <= start <= _U64_MAX - len(messages) + 1
        or not 0 <= stream_id <= _U64_MAX
    ):
        return False
    for i, m in enumerate(messages):
        f, t = m.flags, m.event_time
        if (
            (f != 0 and f != EVENT_TIME)
            or m.message_id != start + i
            or m.stream_id != stream_id
            or (t is None) == bool(f)
            or m.key is not None
            or type(m.payload) is not bytes
            or len(m.payload) > _MAX_PAYLOAD
        ):
            return False
        if t is not None and not (type(t) is int and 0 <= t <= _U64_MAX):
            return False
    return True
