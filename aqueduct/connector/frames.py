"""Connector protocol frames: encoding, decoding and stream splitting.

Wire format (spec/connector-wire.md section 1): ``u32`` big-endian length of
everything after it, a one-byte tag, then the body. ``short_bytes`` is a
``u16`` length plus bytes. Every decode problem raises
:class:`ConnectorFrameError` whose ``str()`` is the exact reason a worker puts
in its ERROR frame, so the session machines never have to rephrase errors.

This module is pure (no I/O, no clock): the same code serves the worker, the
connector library, TCP and Aqueduct transports.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from aqueduct.connector.body_reader import BodyReader
from aqueduct.records.flags import BOUNDARY, EOS, EPHEMERAL, EVENT_TIME, KEY, UNSTABLE_REFERENCE

__all__ = [
    "ACK_TAG",
    "BOUNDARY",
    "DEFAULT_MAX_FRAME_SIZE",
    "EOS",
    "EPHEMERAL",
    "ERROR_TAG",
    "EVENT_TIME",
    "HELLO_TAG",
    "KEY",
    "MESSAGE_TAG",
    "NOTIFY_TAG",
    "OK_TAG",
    "PROTOCOL_VERSION",
    "RESTART_TAG",
    "UNSTABLE_REFERENCE",
    "Ack",
    "ConnectorFrameError",
    "ConnectorMessage",
    "Error",
    "Frame",
    "FrameSplitter",
    "Hello",
    "ColumnRun",
    "RunFactory",
    "Notify",
    "Ok",
    "Restart",
    "StreamRef",
    "decode",
    "encode",
    "frame_name",
    "validate_flags",
]

PROTOCOL_VERSION = "0f5076ed-4e7a-5314-9e25-bde14dc61287"
DEFAULT_MAX_FRAME_SIZE = 4 * 1024 * 1024

HELLO_TAG = 0x48
OK_TAG = 0x4F
ERROR_TAG = 0x45
NOTIFY_TAG = 0x4E
MESSAGE_TAG = 0x4D
ACK_TAG = 0x41
RESTART_TAG = 0x21

_KNOWN_FLAGS = EPHEMERAL | BOUNDARY | EOS | UNSTABLE_REFERENCE | EVENT_TIME | KEY

_U16_MAX = 0xFFFF
_U32_MAX = 0xFFFF_FFFF
_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF


class ConnectorFrameError(ValueError):
    """A frame broke the wire format; ``str()`` is the exact ERROR reason to send."""


@dataclass(slots=True)
class Hello:
    """First frame of a session (connector -> worker)."""

    TAG = HELLO_TAG
    NAME = "HELLO"

    version: str
    cookie: bytes
    program_name: str
    instance_name: str

    def _encode(self) -> bytes:
        return b"".join(
            (
                _short("HELLO", "version", self.version),
                _short("HELLO", "cookie", self.cookie),
                _short("HELLO", "program name", self.program_name),
                _short("HELLO", "instance name", self.instance_name),
            )
        )


@dataclass(slots=True)
class StreamRef:
    """One stream's durable point of reference as listed in OK."""

    stream_id: int
    stream_name: str
    point_of_reference: int


@dataclass(slots=True)
class Ok:
    """Handshake accepted: initial credits and the points of reference to resume from."""

    TAG = OK_TAG
    NAME = "OK"

    credits: int
    refs: tuple[StreamRef, ...] = ()

    def _encode(self) -> bytes:
        parts = [_u32("OK", "credits", self.credits)]
        for ref in self.refs:
            parts += (
                _u64("OK", "stream id", ref.stream_id),
                _short("OK", "stream name", ref.stream_name),
                _u64("OK", "point of reference", ref.point_of_reference),
            )
        return b"".join(parts)


@dataclass(slots=True)
class Error:
    """Either side gives up; ``reason`` is for the operator."""

    TAG = ERROR_TAG
    NAME = "ERROR"

    reason: str

    def _encode(self) -> bytes:
        return _short("ERROR", "reason", self.reason)


@dataclass(slots=True)
class Notify:
    """Opens (or re-opens) a stream from a point of reference; costs one credit."""

    TAG = NOTIFY_TAG
    NAME = "NOTIFY"

    stream_id: int
    stream_name: str
    point_of_reference: int

    def _encode(self) -> bytes:
        return b"".join(
            (
                _u64("NOTIFY", "stream id", self.stream_id),
                _short("NOTIFY", "stream name", self.stream_name),
                _u64("NOTIFY", "point of reference", self.point_of_reference),
            )
        )


@dataclass(slots=True)
class ConnectorMessage:
    """One application message (a MESSAGE frame); costs one credit.

    Named for its protocol: ``aqueduct.Message`` is what a channel delivers,
    and the Wallaroo wire has its own
    (:class:`~aqueduct.connector.wallaroo.frames.WallarooMessage`).

    What a producer builds and sends; on the worker side messages travel
    in columns, as a :class:`~aqueduct.connector.batch.MessageBatch` (a
    sequence of these, built on access). One set of names
    (:attr:`ephemeral`, :attr:`boundary`, :attr:`eos`, :attr:`stable`) for
    what its flags mean.

    Optional fields are present exactly when the flags say so: ``message_id``
    unless EPHEMERAL, ``event_time`` with EVENT_TIME, ``key`` with KEY, and
    ``payload`` unless BOUNDARY (a BOUNDARY carries ``None``).
    """

    TAG = MESSAGE_TAG
    NAME = "MESSAGE"

    flags: int
    stream_id: int
    message_id: int | None = None
    event_time: int | None = None
    key: bytes | None = None
    payload: bytes | None = b""

    @classmethod
    def build(
        cls,
        stream_id: int,
        payload: bytes | None = b"",
        *,
        message_id: int | None = None,
        event_time: int | None = None,
        key: bytes | None = None,
        boundary: bool = False,
        eos: bool = False,
        unstable: bool = False,
    ) -> ConnectorMessage:
        """A record from what it means rather than its bits: the one place the message keywords become flags.

        A record without an id is EPHEMERAL (the codec's rule too), a
        BOUNDARY carries no payload, and ``unstable`` is UNSTABLE_REFERENCE.
        The producer's ``send`` hands its keywords to this; only a plain
        data record (an id or none, an event time or none) is built without
        it, by the stream that numbers it.
        """
        flags = (
            (EPHEMERAL if message_id is None else 0)
            | (BOUNDARY if boundary else 0)
            | (EOS if eos else 0)
            | (UNSTABLE_REFERENCE if unstable else 0)
            | (EVENT_TIME if event_time is not None else 0)
            | (KEY if key is not None else 0)
        )
        return cls(flags, stream_id, message_id, event_time, key, None if boundary else payload)

    @property
    def ephemeral(self) -> bool:
        """EPHEMERAL: no id, never deduplicated, never moves a point of reference."""
        return bool(self.flags & EPHEMERAL)

    @property
    def boundary(self) -> bool:
        """BOUNDARY: closes its stream's epoch; carries no payload."""
        return bool(self.flags & BOUNDARY)

    @property
    def eos(self) -> bool:
        """EOS: the last record of its stream until it is notified again."""
        return bool(self.flags & EOS)

    @property
    def stable(self) -> bool:
        """The spec's "message with a stable reference": it may move its stream's point.

        Neither EPHEMERAL nor UNSTABLE_REFERENCE; the log stores this as its
        ``stable`` column.
        """
        return not self.flags & (EPHEMERAL | UNSTABLE_REFERENCE)

    def _encode(self) -> bytes:
        return _message_body(self)


class ColumnRun(Protocol):
    """A batch of one stream's MESSAGEs as columns (the connector's
    :class:`~aqueduct.connector.batch.MessageBatch`): what the worker's decoder
    gathers a run of data records into (it only appends to its payloads and
    event times), and what :func:`encode` packs a run from (``flags`` None)."""

    TAG: int
    stream_id: int
    first_id: int
    payloads: list[bytes]
    event_times: list[int | None]
    flags: list[int] | None

    def __iter__(self) -> Iterator[ConnectorMessage]: ...


RunFactory = Callable[[int, int, list[bytes], list["int | None"]], ColumnRun]
"""``(stream id, first id, payloads, event times) -> run``: how :class:`FrameSplitter`
starts a run. Injected, so the codec stays below the batch type that holds them."""


@dataclass(slots=True)
class Ack:
    """Worker replenishes credits and reports committed points of reference."""

    TAG = ACK_TAG
    NAME = "ACK"

    credits: int
    refs: tuple[tuple[int, int], ...] = ()

    def _encode(self) -> bytes:
        parts = [_u32("ACK", "credits", self.credits), _u32("ACK", "count", len(self.refs))]
        for stream_id, point in self.refs:
            parts += (_u64("ACK", "stream id", stream_id), _u64("ACK", "point of reference", point))
        return b"".join(parts)


@dataclass(slots=True)
class Restart:
    """Worker asks the connector to reconnect and resume from OK's points."""

    TAG = RESTART_TAG
    NAME = "RESTART"

    def _encode(self) -> bytes:
        return b""


Frame = Hello | Ok | Error | Notify | ConnectorMessage | Ack | Restart





def frame_name(frame: Frame) -> str:
    """The spec's name of a frame (``"ACK"``), for error reasons."""
    return frame.NAME


def _flag_names(flags: int) -> str:
    names = [
        name
        for bit, name in (
            (EPHEMERAL, "EPHEMERAL"),
            (BOUNDARY, "BOUNDARY"),
            (EOS, "EOS"),
            (UNSTABLE_REFERENCE, "UNSTABLE_REFERENCE"),
            (EVENT_TIME, "EVENT_TIME"),
            (KEY, "KEY"),
        )
        if flags & bit
    ]
    return "|".join(names) or "none"


def _flags_ok(flags: int, has_payload: bool) -> bool:
    """Cheap check for the hot path; :func:`validate_flags` explains a failure."""
    return not (
        flags & ~_KNOWN_FLAGS
        or (flags & EPHEMERAL and flags & (BOUNDARY | UNSTABLE_REFERENCE))
        or (flags & BOUNDARY and (flags & KEY or has_payload))
    )


def validate_flags(flags: int, has_payload: bool) -> None:
    """Raise if ``flags`` is a combination the spec forbids.

    Shared by encoder and decoder so that we can never emit a frame we would
    refuse to receive.
    """
    if not isinstance(flags, int) or not 0 <= flags <= _U16_MAX:
        raise ConnectorFrameError(f"invalid message flags {flags!r}: not a u16")
    if _flags_ok(flags, has_payload):
        return
    prefix = f"invalid message flags 0x{flags:04x} ({_flag_names(flags)})"
    reserved = flags & ~_KNOWN_FLAGS
    if reserved:
        raise ConnectorFrameError(f"{prefix}: reserved bits 0x{reserved:04x} set")
    if flags & EPHEMERAL and flags & BOUNDARY:
        raise ConnectorFrameError(f"{prefix}: EPHEMERAL with BOUNDARY")
    if flags & EPHEMERAL and flags & UNSTABLE_REFERENCE:
        raise ConnectorFrameError(f"{prefix}: EPHEMERAL with UNSTABLE_REFERENCE")
    if flags & BOUNDARY and flags & KEY:
        raise ConnectorFrameError(f"{prefix}: BOUNDARY with KEY")
    raise ConnectorFrameError(f"{prefix}: BOUNDARY with a payload")


# ---------------------------------------------------------------- encoding


def _uint(frame: str, field: str, value: int, fmt: str, top: int) -> bytes:
    if not isinstance(value, int) or not 0 <= value <= top:
        raise ConnectorFrameError(f"{frame}: {field} {value!r} out of range 0..{top}")
    return struct.pack(fmt, value)


def _u32(frame: str, field: str, value: int) -> bytes:
    return _uint(frame, field, value, ">I", _U32_MAX)


def _u64(frame: str, field: str, value: int) -> bytes:
    return _uint(frame, field, value, ">Q", _U64_MAX)


def _short(frame: str, field: str, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else bytes(value)
    if len(data) > _U16_MAX:
        raise ConnectorFrameError(f"{frame}: {field} is {len(data)} bytes, more than 65535")
    return struct.pack(">H", len(data)) + data


def _check_optional(name: str, present: bool, value: object, flag: str) -> None:
    if present != (value is not None):
        want = "required" if present else "forbidden"
        raise ConnectorFrameError(f"MESSAGE: {name} is {want} by flag {flag}")


_HEAD = struct.Struct(">HQ")  # flags, stream id
_HEAD_ID = struct.Struct(">HQQ")  # flags, stream id, message id
_U64 = struct.Struct(">Q")
# Whole MESSAGE frame heads: length, tag, flags, stream id, message id (, event time).
_MESSAGE_HEAD = struct.Struct(">IBHQQ")
_MESSAGE_HEAD_TIME = struct.Struct(">IBHQQQ")
#: Flags of the MESSAGEs the fast paths handle: an id and a payload, no key.
_PLAIN_FLAGS = EOS | UNSTABLE_REFERENCE | EVENT_TIME


def _message_body(m: ConnectorMessage) -> bytes:
    flags = m.flags
    validate_flags(flags, bool(m.payload))
    if not (
        (m.message_id is None) == bool(flags & EPHEMERAL)
        and (m.event_time is not None) == bool(flags & EVENT_TIME)
        and (m.key is not None) == bool(flags & KEY)
        and (m.payload is None) == bool(flags & BOUNDARY)
    ):
        _explain_fields(m)
    try:
        if m.message_id is None:
            head = _HEAD.pack(flags, m.stream_id)
        else:
            head = _HEAD_ID.pack(flags, m.stream_id, m.message_id)
        event_time = b"" if m.event_time is None else _U64.pack(m.event_time)
    except struct.error:
        _explain_ranges(m)
        raise
    key = b"" if m.key is None else _short("MESSAGE", "key", m.key)
    return b"".join((head, event_time, key, m.payload or b""))


def _explain_fields(m: ConnectorMessage) -> None:
    """Raise the error naming which optional field disagrees with the flags."""
    _check_optional("message id", not m.flags & EPHEMERAL, m.message_id, "EPHEMERAL (absent)")
    _check_optional("event time", bool(m.flags & EVENT_TIME), m.event_time, "EVENT_TIME")
    _check_optional("key", bool(m.flags & KEY), m.key, "KEY")
    _check_optional("payload", not m.flags & BOUNDARY, m.payload, "BOUNDARY (absent)")


def _explain_ranges(m: ConnectorMessage) -> None:
    """Raise the error naming the integer field that does not fit a u64."""
    _u64("MESSAGE", "stream id", m.stream_id)
    if m.message_id is not None:
        _u64("MESSAGE", "message id", m.message_id)
    if m.event_time is not None:
        _u64("MESSAGE", "event time", m.event_time)


def encode(frame: Frame | ColumnRun) -> bytes:
    """Encode one frame, length prefix included; or a batch of MESSAGEs, its frames back to back.

    A batch is a :class:`~aqueduct.connector.batch.MessageBatch` (which this
    codec knows as :class:`ColumnRun`); a single :class:`ConnectorMessage` is the
    batch of one. A run (what a busy stream carries) is packed from its
    columns, one pack per record and no object; anything else, and a run
    holding a value out of range, is encoded record by record, which
    validates each and raises the error naming the first bad one.
    """
    kind = type(frame)
    if kind is ConnectorMessage:
        plain = _encode_plain_message(frame)  # type: ignore[arg-type]
        if plain is not None:
            return plain
    elif kind not in _FRAME_TYPES:
        if getattr(frame, "TAG", None) == MESSAGE_TAG and hasattr(frame, "payloads"):
            return _encode_batch(frame)  # type: ignore[arg-type]
        raise TypeError(f"not a connector frame: {frame!r}")
    body = frame._encode()  # type: ignore[union-attr]
    return struct.pack(">IB", len(body) + 1, frame.TAG) + body


def _encode_batch(batch: ColumnRun) -> bytes:
    """A batch's frames back to back: a run from its columns in one step, else each message's."""
    if batch.flags is None:
        payloads, times = batch.payloads, batch.event_times
        sid, first, n = batch.stream_id, batch.first_id, len(payloads)
        pack, head = _MESSAGE_HEAD.pack, _MESSAGE_HEAD.size - 4
        parts: list[bytes] = [b""] * (2 * n)
        try:
            if times.count(None) == n:  # the commonest run (no event times): one pack per record, no call
                parts[0::2] = [pack(head + len(p), MESSAGE_TAG, 0, sid, first + i) for i, p in enumerate(payloads)]
            else:
                pack_time, head_time = _MESSAGE_HEAD_TIME.pack, _MESSAGE_HEAD_TIME.size - 4
                parts[0::2] = [
                    pack(head + len(p), MESSAGE_TAG, 0, sid, first + i)
                    if t is None
                    else pack_time(head_time + len(p), MESSAGE_TAG, EVENT_TIME, sid, first + i, t)
                    for i, (p, t) in enumerate(zip(payloads, times, strict=True))
                ]
            parts[1::2] = payloads
            return b"".join(parts)
        except struct.error:
            pass  # a value out of range: each record's own encoding names it
    return b"".join([encode(m) for m in batch])  # type: ignore[attr-defined]


def _encode_plain_message(m: ConnectorMessage) -> bytes | None:
    """The common MESSAGE (id, optional event time, no key, bytes payload) in one pack; else None.

    Every other case, and any value out of range, goes the general way,
    which validates and explains.
    """
    flags, event_time, payload = m.flags, m.event_time, m.payload
    if (
        flags & ~_PLAIN_FLAGS
        or m.message_id is None
        or m.key is not None
        or type(payload) is not bytes
        or (event_time is None) == bool(flags & EVENT_TIME)
    ):
        return None
    try:
        if event_time is None:
            size = _MESSAGE_HEAD.size - 4 + len(payload)
            head = _MESSAGE_HEAD.pack(size, MESSAGE_TAG, flags, m.stream_id, m.message_id)
        else:
            size = _MESSAGE_HEAD_TIME.size - 4 + len(payload)
            head = _MESSAGE_HEAD_TIME.pack(
                size, MESSAGE_TAG, flags, m.stream_id, m.message_id, event_time
            )
    except struct.error:
        return None
    return head + payload


# ---------------------------------------------------------------- decoding


def _plain_messages(
    view: memoryview, pos: int, limit: int, frames: list[Frame | ColumnRun], make_run: RunFactory | None
) -> int:
    """Decode the whole, plain MESSAGEs from ``pos`` on into ``frames``; return where they end.

    The hot path of :meth:`FrameSplitter.drain`, one loop over a run of
    frames: one unpack for the length prefix, tag and fixed fields, one
    copy for the payload, the names looked up once per run. It stops at
    anything unusual (another frame type, a key, EPHEMERAL, BOUNDARY, a
    short or incomplete frame, a bad length), which is left to the general
    decoder, which also names the error. With ``make_run``, data records
    that continue the previous one's stream and id join its run (columns)
    instead of becoming a :class:`ConnectorMessage` each.
    """
    n = len(view)
    head, head_size, unpack_time = _MESSAGE_HEAD.unpack_from, _MESSAGE_HEAD.size, _U64.unpack_from
    append, not_plain, tag_message = frames.append, ~_PLAIN_FLAGS, MESSAGE_TAG
    not_data = _PLAIN_FLAGS & ~EVENT_TIME  # EOS, UNSTABLE_REFERENCE: a ConnectorMessage of its own
    run_stream = next_id = -1  # the stream and next id of the run that frames[-1] is (-1: none)
    add_payload, add_time = [].append, [].append  # that run's column appends, set as it starts
    while n - pos >= head_size:  # bounded: every round consumes one frame
        length, tag, flags, stream_id, message_id = head(view, pos)
        end = pos + 4 + length
        start = pos + head_size
        if tag != tag_message or flags & not_plain or length > limit or end > n:
            break
        event_time = None
        if flags & EVENT_TIME:
            start += 8
            if start > end:
                break
            (event_time,) = unpack_time(view, start - 8)
        elif start > end:
            break
        pos = end
        if flags & not_data or make_run is None:
            run_stream = -1
            append(ConnectorMessage(flags, stream_id, message_id, event_time, None, view[start:end].tobytes()))
        elif message_id == next_id and stream_id == run_stream:
            add_payload(view[start:end].tobytes())
            add_time(event_time)
            next_id += 1
        else:
            run = make_run(stream_id, message_id, [view[start:end].tobytes()], [event_time])
            append(run)
            add_payload, add_time = run.payloads.append, run.event_times.append
            run_stream, next_id = stream_id, message_id + 1
    return pos


def _read_message(r: BodyReader) -> ConnectorMessage:
    flags = r.u16("flags")
    validate_flags(flags, has_payload=False)
    stream_id = r.u64("stream id")
    message_id = None if flags & EPHEMERAL else r.u64("message id")
    event_time = r.u64("event time") if flags & EVENT_TIME else None
    key = r.short("key") if flags & KEY else None
    payload: bytes | None = None
    if flags & BOUNDARY:
        validate_flags(flags, has_payload=r.left() > 0)
    else:
        payload = r.rest()
    return ConnectorMessage(flags, stream_id, message_id, event_time, key, payload)


def _decode_frame(buf: bytes | memoryview, pos: int, end: int) -> Frame:
    """Decode the whole frame ``buf[pos:end]`` (length prefix included, already checked)."""
    return _decode_body(buf[pos + 4], bytes(buf[pos + 5 : end]))


def _read_hello(r: BodyReader) -> Hello:
    # The version is kept even if it is not UTF-8 so the session can say
    # "unsupported protocol version: <got>" rather than a codec error.
    version = r.short("version").decode(errors="backslashreplace")
    return Hello(version, r.short("cookie"), r.text("program name"), r.text("instance name"))


def _read_ok(r: BodyReader) -> Ok:
    credits = r.u32("credits")
    refs = []
    while r.left():
        refs.append(StreamRef(r.u64("stream id"), r.text("stream name"), r.u64("point of reference")))
    return Ok(credits, tuple(refs))


def _read_error(r: BodyReader) -> Error:
    return Error(r.short("reason").decode(errors="replace"))


def _read_notify(r: BodyReader) -> Notify:
    return Notify(r.u64("stream id"), r.text("stream name"), r.u64("point of reference"))


def _read_ack(r: BodyReader) -> Ack:
    credits, count = r.u32("credits"), r.u32("count")
    if count * 16 > r.left():
        raise ConnectorFrameError(
            f"ACK: count {count} needs {count * 16} bytes of pairs, {r.left()} left"
        )
    return Ack(credits, tuple((r.u64("stream id"), r.u64("point of reference")) for _ in range(count)))


def _read_restart(r: BodyReader) -> Restart:
    return Restart()


# Each body reader takes a cursor over the body and returns the frame; the
# cursor names the frame and field of any short read.
_READERS = {
    Hello: _read_hello,
    Ok: _read_ok,
    Error: _read_error,
    Notify: _read_notify,
    ConnectorMessage: _read_message,
    Ack: _read_ack,
    Restart: _read_restart,
}
_FRAME_TYPES = set(_READERS)
#: tag byte -> (frame class, reader)
_BY_TAG: dict[int, tuple[type, object]] = {cls.TAG: (cls, reader) for cls, reader in _READERS.items()}


def _decode_body(tag: int, body: bytes) -> Frame:
    entry = _BY_TAG.get(tag)
    if entry is None:
        raise ConnectorFrameError(f"unknown frame tag 0x{tag:02x}")
    cls, reader = entry
    r = BodyReader(cls.NAME, body, ConnectorFrameError)
    frame = reader(r)  # type: ignore[operator]
    r.end()
    return frame


def decode(frame_bytes: bytes) -> Frame:
    """Decode exactly one whole frame, length prefix included."""
    if len(frame_bytes) < 4:
        raise ConnectorFrameError(f"frame shorter than its 4-byte length prefix ({len(frame_bytes)} bytes)")
    (length,) = struct.unpack_from(">I", frame_bytes)
    if length == 0:
        raise ConnectorFrameError("zero-length frame: no tag")
    if length != len(frame_bytes) - 4:
        raise ConnectorFrameError(
            f"frame length prefix says {length} bytes but {len(frame_bytes) - 4} follow"
        )
    return _decode_body(frame_bytes[4], bytes(frame_bytes[5:]))


_LENGTH = struct.Struct(">I")


def _frame_end(buf: bytes | bytearray | memoryview, pos: int, max_frame_size: int) -> int:
    """End of the frame starting at ``pos``, or -1 while its bytes are not all there.

    The length prefix is checked as soon as its 4 bytes are here, before
    the body arrives.
    """
    if len(buf) - pos < 4:
        return -1
    (length,) = _LENGTH.unpack_from(buf, pos)
    if length > max_frame_size:
        raise ConnectorFrameError(f"frame too large: {length} > {max_frame_size}")
    if length == 0:
        raise ConnectorFrameError("zero-length frame: no tag")
    end = pos + 4 + length
    return end if end <= len(buf) else -1


class FrameSplitter:
    """Incremental decoder for a byte stream of back-to-back frames.

    The length prefix is checked against ``max_frame_size`` as soon as its 4
    bytes are here, *before* any of the body is buffered, so a hostile peer
    cannot make us hold a huge frame. After an error the splitter is dead:
    the spec says nothing else is read.

    ``runs`` (the worker's, :meth:`MessageBatch.run
    <aqueduct.connector.batch.MessageBatch.run>`): :meth:`drain` gives
    consecutive data records of one stream as one run of columns made by
    it, rather than a :class:`ConnectorMessage` each; anything else comes as it
    always does.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, *, runs: RunFactory | None = None) -> None:
        self.max_frame_size = max_frame_size
        self.runs = runs
        self._buf = bytearray()
        self._pos = 0  # start of the first undecoded frame; compacted on push
        self._failed: ConnectorFrameError | None = None

    def push(self, data: bytes) -> None:
        """Append received bytes; frames come out of :meth:`next_frame` or :meth:`drain`."""
        if self._failed is None:
            del self._buf[: self._pos]
            self._pos = 0
            self._buf += data

    def next_frame(self) -> Frame | None:
        """Return the next whole frame, ``None`` if more bytes are needed, or raise."""
        if self._failed is not None:
            raise self._failed
        try:
            end = _frame_end(self._buf, self._pos, self.max_frame_size)
            if end < 0:
                return None
            with memoryview(self._buf) as view:
                frame = _decode_frame(view, self._pos, end)
            self._pos = end
            return frame
        except ConnectorFrameError as exc:
            raise self._die(exc) from None

    def drain(self) -> tuple[list[Frame | ColumnRun], ConnectorFrameError | None]:
        """Every frame now whole, decoded in one pass over the buffer (no per-frame copy).

        Also returns the error of a bad frame after them, if any (the
        splitter is dead then): the caller still handles the good frames
        first, as the spec wants everything before the bad frame processed.
        """
        if self._failed is not None:
            return [], self._failed
        frames: list[Frame | ColumnRun] = []
        buf, pos, limit, runs = self._buf, self._pos, self.max_frame_size, self.runs
        with memoryview(buf) as view:
            try:
                # Bounded: every round consumes one whole frame of the buffer.
                while True:
                    pos = _plain_messages(view, pos, limit, frames, runs)
                    end = _frame_end(buf, pos, limit)
                    if end < 0:
                        break
                    frames.append(_decode_frame(view, pos, end))
                    pos = end
            except ConnectorFrameError as exc:
                failed: ConnectorFrameError | None = exc
            else:
                failed = None
        if failed is not None:
            return frames, self._die(failed)
        self._pos = pos
        return frames, None

    def _die(self, exc: ConnectorFrameError) -> ConnectorFrameError:
        """Remember the first error: the stream is unusable from here on."""
        self._failed = exc
        self._buf.clear()
        self._pos = 0
        return exc

    def feed(self, data: bytes) -> list[Frame | ColumnRun]:
        """Push ``data`` and return every frame now complete (raises on the first bad one)."""
        self.push(data)
        frames, error = self.drain()
        if error is not None:
            raise error
        return frames

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame waiting for more input."""
        return len(self._buf) - self._pos


def __getattr__(name: str) -> object:
    """``Message``, this class's old name (the docs showed it), warns and works for one release."""
    if name == "Message":
        from aqueduct._moved import moved_name  # only for the old name's users

        return moved_name(__name__, name, __name__, "ConnectorMessage")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
