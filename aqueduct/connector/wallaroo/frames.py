"""Wallaroo v3 connector frames: encoding, decoding and stream splitting.

The wire of spec/wallaroo-compat.md: ``u32`` big-endian length of everything
after it, a one-byte tag (0-8), then the body; ``short_bytes`` is a ``u16``
length plus bytes. It is the released revision of the protocol whose first
draft :mod:`aqueduct.connector.frames` implements, so the layout looks
alike, but tags, OK, MESSAGE and RESTART differ and points of reference mean
something else (inclusive here); the two codecs share no code on purpose, so
that neither can change the other's bytes.

Every decode problem raises :class:`WallarooFrameError` whose ``str()`` is
the exact reason the worker puts in its ERROR frame. Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from aqueduct.connector.body_reader import BodyReader

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "NO_POINT",
    "PROTOCOL_VERSION",
    "WallarooAck",
    "EndOfStream",
    "WallarooError",
    "Frame",
    "WallarooFrameSplitter",
    "WallarooHello",
    "WallarooMessage",
    "WallarooNotify",
    "NotifyAck",
    "WallarooOk",
    "WallarooRestart",
    "WallarooFrameError",
    "decode",
    "encode",
]

PROTOCOL_VERSION = "0.0.1"
DEFAULT_MAX_FRAME_SIZE = 4 * 1024 * 1024
NO_POINT = 2**64 - 1
"""The v3 point of reference meaning "nothing held yet"."""

HELLO_TAG, OK_TAG, ERROR_TAG, NOTIFY_TAG, NOTIFY_ACK_TAG = 0, 1, 2, 3, 4
MESSAGE_TAG, ACK_TAG, RESTART_TAG, EOS_MESSAGE_TAG = 5, 6, 7, 8
TWO_PHASE_COMMIT_TAGS = range(201, 207)
"""Wallaroo's sink-side two-phase commit: never part of a source connection."""

_U16, _U32, _U64 = 0xFFFF, 0xFFFF_FFFF, 2**64 - 1
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


class WallarooFrameError(ValueError):
    """A frame broke the v3 wire format; ``str()`` is the exact ERROR reason to send."""


@dataclass(frozen=True, slots=True)
class WallarooHello:
    """First frame of a connection (connector -> worker)."""

    version: str
    cookie: bytes
    program_name: str
    instance_name: str


@dataclass(frozen=True, slots=True)
class WallarooOk:
    """Handshake accepted: initial credits only (points come per stream in NOTIFY_ACK)."""

    credits: int


@dataclass(frozen=True, slots=True)
class WallarooError:
    """Either side gives up; ``reason`` is for the operator."""

    reason: str


@dataclass(frozen=True, slots=True)
class WallarooNotify:
    """Opens a stream; ``point_of_reference`` is inclusive (:data:`NO_POINT` = nothing)."""

    stream_id: int
    stream_name: str
    point_of_reference: int


@dataclass(frozen=True, slots=True)
class NotifyAck:
    """The worker's answer to NOTIFY: its (inclusive) point overrides the connector's."""

    success: bool
    stream_id: int
    point_of_reference: int


@dataclass(frozen=True, slots=True)
class WallarooMessage:
    """One application message. ``event_time`` 0, an empty key or payload mean none."""

    stream_id: int
    message_id: int
    event_time: int = 0
    key: bytes = b""
    payload: bytes = b""


@dataclass(frozen=True, slots=True)
class WallarooAck:
    """Credits, and per stream the id of the last message committed (inclusive)."""

    credits: int
    refs: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class WallarooRestart:
    """Reconnect (to ``address`` if not empty) and re-notify every stream."""

    address: str = ""


@dataclass(frozen=True, slots=True)
class EndOfStream:
    """EOS_MESSAGE: the connector closes a stream (costs no credit)."""

    stream_id: int


Frame = WallarooHello | WallarooOk | WallarooError | WallarooNotify | NotifyAck | WallarooMessage | WallarooAck | WallarooRestart | EndOfStream

_NAMES = {
    HELLO_TAG: "HELLO",
    OK_TAG: "OK",
    ERROR_TAG: "ERROR",
    NOTIFY_TAG: "NOTIFY",
    NOTIFY_ACK_TAG: "NOTIFY_ACK",
    MESSAGE_TAG: "MESSAGE",
    ACK_TAG: "ACK",
    RESTART_TAG: "RESTART",
    EOS_MESSAGE_TAG: "EOS_MESSAGE",
}
_TAGS = {
    WallarooHello: HELLO_TAG,
    WallarooOk: OK_TAG,
    WallarooError: ERROR_TAG,
    WallarooNotify: NOTIFY_TAG,
    NotifyAck: NOTIFY_ACK_TAG,
    WallarooMessage: MESSAGE_TAG,
    WallarooAck: ACK_TAG,
    WallarooRestart: RESTART_TAG,
    EndOfStream: EOS_MESSAGE_TAG,
}


def frame_name(frame: Frame) -> str:
    """The spec's name of a frame (``"NOTIFY_ACK"``), for error reasons."""
    return _NAMES[_TAGS[type(frame)]]


# ---------------------------------------------------------------- encoding


class _Writer:
    """Collects one body; every out-of-range value names the frame and field."""

    __slots__ = ("frame", "parts")

    def __init__(self, frame: str) -> None:
        self.frame = frame
        self.parts: list[bytes] = []

    def number(self, field: str, value: int, fmt: str, low: int, high: int) -> _Writer:
        if not isinstance(value, int) or not low <= value <= high:
            raise WallarooFrameError(f"{self.frame}: {field} {value!r} out of range {low}..{high}")
        self.parts.append(struct.pack(fmt, value))
        return self

    def u8(self, field: str, value: int) -> _Writer:
        return self.number(field, value, ">B", 0, 1)

    def u32(self, field: str, value: int) -> _Writer:
        return self.number(field, value, ">I", 0, _U32)

    def u64(self, field: str, value: int) -> _Writer:
        return self.number(field, value, ">Q", 0, _U64)

    def raw(self, field: str, value: bytes | str, prefix: str, top: int) -> _Writer:
        data = value.encode() if isinstance(value, str) else bytes(value)
        if len(data) > top:
            raise WallarooFrameError(f"{self.frame}: {field} is {len(data)} bytes, more than {top}")
        self.parts += (struct.pack(prefix, len(data)), data)
        return self

    def short(self, field: str, value: bytes | str) -> _Writer:
        return self.raw(field, value, ">H", _U16)


def _body(frame: Frame) -> bytes:
    w = _Writer(frame_name(frame))
    match frame:
        case WallarooHello(version, cookie, program, instance):
            w.short("version", version).short("cookie", cookie)
            w.short("program name", program).short("instance name", instance)
        case WallarooOk(credits):
            w.u32("credits", credits)
        case WallarooError(reason):
            w.short("reason", reason)
        case WallarooNotify(stream_id, name, point):
            w.u64("stream id", stream_id).short("stream name", name)
            w.u64("point of reference", point)
        case NotifyAck(success, stream_id, point):
            w.u8("success", int(success)).u64("stream id", stream_id)
            w.u64("point of reference", point)
        case WallarooMessage(stream_id, message_id, event_time, key, payload):
            w.u64("stream id", stream_id).u64("message id", message_id)
            w.number("event time", event_time, ">q", _I64_MIN, _I64_MAX).short("key", key)
            w.parts.append(bytes(payload))
        case WallarooAck(credits, refs):
            w.u32("credits", credits).u32("count", len(refs))
            for stream_id, point in refs:
                w.u64("stream id", stream_id).u64("point of reference", point)
        case WallarooRestart(address):
            w.raw("address", address, ">I", _U32)
        case EndOfStream(stream_id):
            w.u64("stream id", stream_id)
    return b"".join(w.parts)


def encode(frame: Frame) -> bytes:
    """Encode one frame, length prefix included."""
    if type(frame) not in _TAGS:
        raise TypeError(f"not a Wallaroo v3 frame: {frame!r}")
    body = _body(frame)
    return struct.pack(">IB", len(body) + 1, _TAGS[type(frame)]) + body


# ---------------------------------------------------------------- decoding


def _read(tag: int, r: BodyReader) -> Frame:
    frame: Frame
    if tag == HELLO_TAG:
        # Kept even if not UTF-8, so the session can name the version it got.
        version = r.short("version").decode(errors="backslashreplace")
        frame = WallarooHello(version, r.short("cookie"), r.text("program name"), r.text("instance name"))
    elif tag == OK_TAG:
        frame = WallarooOk(r.number(4, "credits"))
    elif tag == ERROR_TAG:
        frame = WallarooError(r.short("reason").decode(errors="replace"))
    elif tag == NOTIFY_TAG:
        frame = WallarooNotify(r.number(8, "stream id"), r.text("stream name"), r.number(8, "point of reference"))
    elif tag == NOTIFY_ACK_TAG:
        success = r.number(1, "success")
        if success > 1:
            raise WallarooFrameError(f"NOTIFY_ACK: success is {success}, not 0 or 1")
        frame = NotifyAck(bool(success), r.number(8, "stream id"), r.number(8, "point of reference"))
    elif tag == MESSAGE_TAG:
        stream_id, message_id = r.number(8, "stream id"), r.number(8, "message id")
        event_time = r.number(8, "event time", signed=True)
        frame = WallarooMessage(stream_id, message_id, event_time, r.short("key"), r.rest())
    elif tag == ACK_TAG:
        credits, count = r.number(4, "credits"), r.number(4, "count")
        left = len(r.data) - r.pos
        if count * 16 > left:
            raise WallarooFrameError(f"ACK: count {count} needs {count * 16} bytes of pairs, {left} left")
        refs = tuple((r.number(8, "stream id"), r.number(8, "point of reference")) for _ in range(count))
        frame = WallarooAck(credits, refs)
    elif tag == RESTART_TAG:
        address = r.take(r.number(4, "address length"), "address")
        frame = WallarooRestart(address.decode(errors="backslashreplace"))
    else:
        frame = EndOfStream(r.number(8, "stream id"))
    r.end()
    return frame


def _decode_body(tag: int, body: bytes) -> Frame:
    name = _NAMES.get(tag)
    if name is None:
        if tag in TWO_PHASE_COMMIT_TAGS:
            raise WallarooFrameError(
                f"frame tag {tag} is a two-phase-commit frame, not part of a source connection"
            )
        raise WallarooFrameError(f"unknown frame tag {tag}")
    return _read(tag, BodyReader(name, body, WallarooFrameError))


def _check_length(length: int, max_frame_size: int) -> None:
    if length > max_frame_size:
        raise WallarooFrameError(f"frame too large: {length} > {max_frame_size}")
    if length == 0:
        raise WallarooFrameError("zero-length frame: no tag")


def decode(frame_bytes: bytes, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> Frame:
    """Decode exactly one whole frame, length prefix included."""
    if len(frame_bytes) < 4:
        raise WallarooFrameError(
            f"frame shorter than its 4-byte length prefix ({len(frame_bytes)} bytes)"
        )
    length = int.from_bytes(frame_bytes[:4], "big")
    _check_length(length, max_frame_size)
    if length != len(frame_bytes) - 4:
        raise WallarooFrameError(
            f"frame length prefix says {length} bytes but {len(frame_bytes) - 4} follow"
        )
    return _decode_body(frame_bytes[4], bytes(frame_bytes[5:]))


class WallarooFrameSplitter:
    """Incremental decoder for a byte stream of back-to-back v3 frames.

    The length prefix is checked against ``max_frame_size`` as soon as its 4
    bytes are here, before the body is buffered, so a peer cannot make the
    worker hold a huge frame. After an error the splitter is dead (nothing
    else is read), and :meth:`drain` still returns the good frames before it.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._failed: WallarooFrameError | None = None

    def push(self, data: bytes) -> None:
        """Append received bytes (nothing is decoded yet); ignored once the splitter died."""
        if self._failed is None:
            self._buf += data

    def drain(self) -> tuple[list[Frame], WallarooFrameError | None]:
        """Every frame now whole, and the error of a bad one after them (the splitter then dies)."""
        if self._failed is not None:
            return [], self._failed
        buf = self._buf
        frames: list[Frame] = []
        pos = 0
        try:
            # Bounded: every round consumes one whole frame of the buffer.
            while len(buf) - pos >= 4:
                length = int.from_bytes(buf[pos : pos + 4], "big")
                _check_length(length, self.max_frame_size)
                end = pos + 4 + length
                if end > len(buf):
                    break
                frames.append(_decode_body(buf[pos + 4], bytes(buf[pos + 5 : end])))
                pos = end
        except WallarooFrameError as exc:
            self._failed = exc
            buf.clear()
            return frames, exc
        del buf[:pos]
        return frames, None

    def feed(self, data: bytes) -> list[Frame]:
        """Like :meth:`drain`, but raise the error of a bad frame."""
        self.push(data)
        frames, error = self.drain()
        if error is not None:
            raise error
        return frames

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame waiting for more input."""
        return len(self._buf)
