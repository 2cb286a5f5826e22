"""One stream's MESSAGEs as columns, and as the sequence of their frames: what crosses the worker side.

The columns, their two shapes (a run, general columns) and what every stop
does with them are :class:`~aqueduct.records.columns.RecordColumns`, below
both wings; the durable log takes them as that. This subclass adds what
only the connector knows: each record is a MESSAGE frame
(:class:`~aqueduct.connector.frames.ConnectorMessage`, built on access, for sinks,
tests and the codec's record-by-record path), and which MESSAGEs form a
run the wire can carry (:meth:`MessageBatch.run_of`, the sending side's one
test). The worker session emits one
(:class:`~aqueduct.connector.events.RecordsAccepted`); a message on its
own is the batch of one.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

from aqueduct.connector.frames import EVENT_TIME, MESSAGE_TAG, ConnectorMessage
from aqueduct.records.columns import RecordColumns

__all__ = ["MessageBatch"]

_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF
#: The largest payload a MESSAGE frame's u32 length holds beside its longest head.
_MAX_PAYLOAD = 0xFFFF_FFFF - 31


class MessageBatch(RecordColumns, Sequence[ConnectorMessage]):
    """Consecutive MESSAGEs of one stream, held as columns (see the module docstring).

    It is a sequence of :class:`ConnectorMessage` (each built on access) and equals
    any sequence of the same messages, whichever shape either side has.
    """

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]  # mutable, equal to lists
    TAG = MESSAGE_TAG  # what it is made of, for routing and error reasons
    NAME = "MESSAGE"

    @classmethod
    def of(cls, messages: Sequence[ConnectorMessage]) -> MessageBatch:
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
    def run_of(cls, messages: Sequence[ConnectorMessage]) -> MessageBatch | None:
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

    # ------------------------------------------------------------ Sequence[ConnectorMessage]

    @overload
    def __getitem__(self, index: int) -> ConnectorMessage: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[ConnectorMessage]: ...
    def __getitem__(self, index: int | slice) -> ConnectorMessage | Sequence[ConnectorMessage]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self.payloads)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("MessageBatch index out of range")
        t = self.event_times[index]
        if self.flags is None:
            return ConnectorMessage(0 if t is None else EVENT_TIME, self.stream_id, self.first_id + index, t, None, self.payloads[index])
        return ConnectorMessage(self.flags[index], self.stream_id, self.ids[index], t, self.keys[index], self.payloads[index])  # type: ignore[index]

    def __iter__(self) -> Iterator[ConnectorMessage]:
        stream_id, (flags, ids, keys) = self.stream_id, self.columns()
        for f, i, t, k, p in zip(flags, ids, self.event_times, keys, self.payloads, strict=True):
            yield ConnectorMessage(f, stream_id, i, t, k, p)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented


def _is_run(messages: Sequence[ConnectorMessage]) -> bool:
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
