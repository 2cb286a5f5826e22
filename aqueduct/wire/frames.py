"""The thirteen frames of spec section 3: dataclasses, encoder, decoder.

Each frame is a slotted dataclass carrying ``TAG`` (its first byte) and
``NAME`` (used in every error message). Frames are values: nothing mutates
one after it is built. They are not ``frozen`` because a frozen dataclass's
``__init__`` costs about four times as much (one ``object.__setattr__`` per
field), and a MESSAGE is built for every message received. Frames without a
body are decoded to shared singletons, and the standard VERSION frame is
precomputed, because these codecs run once per message on the hot path.

Decoding is split the same way as in ``varint``: ``read_frame`` raises
``IncompleteData`` when the buffer ends inside a frame (the stream decoder
then waits), ``decode_frame`` treats that as an error. Every rule of the
table in section 3 that can be checked without connection state (non-zero
counts and range lengths, header keys, the VERSION magic and string, limits)
is checked here, on encode as well as on decode, so that we never emit what
we would reject.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from aqueduct._moved import moved_name
from aqueduct.wire.errors import FrameError, IncompleteData, WireError
from aqueduct.wire.varint import (
    Buffer,
    Headers,
    encode_headers,
    encode_varint,
    read_headers,
    read_varbytes,
    read_varint,
)

VERSION_STRING = "0.0.0-AFTER"


@dataclass(frozen=True, slots=True)
class Limits:
    """Decoder limits (spec section 6): anything larger is a protocol violation.

    ``max_header_bytes`` bounds each header data (and the VERSION string);
    ``max_payload_bytes`` bounds each other varbytes (payload, ATTACHMENTS,
    ack ranges), so a peer cannot make an incremental decoder buffer without end.
    """

    max_header_bytes: int = 64 * 1024
    max_payload_bytes: int = 16 * 1024 * 1024


DEFAULT_LIMITS = Limits()


@dataclass(slots=True)
class Version:
    """Prefix frame announcing the protocol version; the magic makes stray bytes fail fast."""

    version: str = VERSION_STRING
    TAG: ClassVar[int] = 239
    NAME: ClassVar[str] = "VERSION"

    def _encode(self) -> bytes:
        if self.version == VERSION_STRING:
            return _VERSION_FRAME
        raw = self.version.encode()
        return _VERSION_HEAD + encode_varint(len(raw)) + raw


@dataclass(slots=True)
class AckVersion:
    """Prefix frame: the peer's VERSION was received, it may stop sending VERSION."""

    TAG: ClassVar[int] = 1
    NAME: ClassVar[str] = "ACK_VERSION"

    def _encode(self) -> bytes:
        return b"\x01"


@dataclass(slots=True)
class ConnectionHeaders:
    """Prefix frame carrying the connection's header multimap (sent once per side)."""

    headers: Headers
    TAG: ClassVar[int] = 2
    NAME: ClassVar[str] = "CONNECTION_HEADERS"

    def _encode(self) -> bytes:
        return b"\x02" + encode_headers(self.headers)


@dataclass(slots=True)
class RouteTo:
    """Opens the routed context: every later frame of the sequence concerns ``chanid``."""

    chanid: int
    TAG: ClassVar[int] = 3
    NAME: ClassVar[str] = "ROUTE_TO"

    def _encode(self) -> bytes:
        return b"\x03" + encode_varint(self.chanid)


@dataclass(slots=True)
class AttachmentRef:
    """A channel half carried by a MESSAGE, with that channel's headers."""

    chanid: int
    headers: Headers


@dataclass(slots=True)
class MessageFrame:
    """One application message (s->r); ``num`` is per (channel, reliable/unreliable) space."""

    num: int
    headers: Headers
    attachments: tuple[AttachmentRef, ...]
    payload: bytes
    TAG: ClassVar[int] = 4
    NAME: ClassVar[str] = "MESSAGE"

    def _encode(self) -> bytes:
        if self.attachments:
            blob = b"".join(
                [encode_varint(a.chanid) + encode_headers(a.headers) for a in self.attachments]
            )
            atts = encode_varint(len(blob)) + blob
        else:
            atts = b"\x00"
        payload = self.payload
        return b"".join(
            (
                b"\x04",
                encode_varint(self.num),
                encode_headers(self.headers),
                atts,
                encode_varint(len(payload)),
                payload,
            )
        )


@dataclass(slots=True)
class SentUnreliable:
    """s->r: ``count`` more unreliable messages were sent (> 0)."""

    count: int
    TAG: ClassVar[int] = 5
    NAME: ClassVar[str] = "SENT_UNRELIABLE"

    def _encode(self) -> bytes:
        if self.count <= 0:
            raise FrameError(self.NAME, "COUNT must be > 0")
        return b"\x05" + encode_varint(self.count)


@dataclass(slots=True)
class FinishSender:
    """s->r: no more messages; ``sent_reliable`` reliable messages were sent in total."""

    sent_reliable: int
    TAG: ClassVar[int] = 6
    NAME: ClassVar[str] = "FINISH_SENDER"

    def _encode(self) -> bytes:
        return b"\x06" + encode_varint(self.sent_reliable)


@dataclass(slots=True)
class CancelSender:
    """s->r: the sender gave up; undelivered messages are dropped."""

    TAG: ClassVar[int] = 7
    NAME: ClassVar[str] = "CANCEL_SENDER"

    def _encode(self) -> bytes:
        return b"\x07"


@dataclass(slots=True)
class AckReliable:
    """r->s: (gap, ack-length) pairs relative to the receiver's ack cursor."""

    ranges: tuple[int, ...]
    TAG: ClassVar[int] = 8
    NAME: ClassVar[str] = "ACK_RELIABLE"

    def _encode(self) -> bytes:
        check_ack_reliable(self.ranges)
        return _encode_varint_list(b"\x08", self.ranges)


@dataclass(slots=True)
class AckNackUnreliable:
    """r->s: alternating ack, nack lengths from the unreliable cursor (a leading 0 = nack first)."""

    ranges: tuple[int, ...]
    TAG: ClassVar[int] = 9
    NAME: ClassVar[str] = "ACK_NACK_UNRELIABLE"

    def _encode(self) -> bytes:
        check_ack_nack(self.ranges)
        return _encode_varint_list(b"\x09", self.ranges)


@dataclass(slots=True)
class CloseReceiver:
    """r->s: the receiver is gone; everything not acked is nacked."""

    TAG: ClassVar[int] = 10
    NAME: ClassVar[str] = "CLOSE_RECEIVER"

    def _encode(self) -> bytes:
        return b"\x0a"


@dataclass(slots=True)
class ForgetChannel:
    """Routed, from the channel's creator: destroy all state of the channel."""

    TAG: ClassVar[int] = 11
    NAME: ClassVar[str] = "FORGET_CHANNEL"

    def _encode(self) -> bytes:
        return b"\x0b"


@dataclass(slots=True)
class Dequeued:
    """r->s flow control: the application consumed ``num_bytes`` (> 0) more bytes."""

    num_bytes: int
    TAG: ClassVar[int] = 12
    NAME: ClassVar[str] = "DEQUEUED"

    def _encode(self) -> bytes:
        if self.num_bytes <= 0:
            raise FrameError(self.NAME, "NUM_BYTES must be > 0")
        return b"\x0c" + encode_varint(self.num_bytes)


Frame = (
    Version
    | AckVersion
    | ConnectionHeaders
    | RouteTo
    | MessageFrame
    | SentUnreliable
    | FinishSender
    | CancelSender
    | AckReliable
    | AckNackUnreliable
    | CloseReceiver
    | ForgetChannel
    | Dequeued
)
PREFIX_FRAMES = (Version, AckVersion, ConnectionHeaders)
ROUTED_FRAMES = (
    MessageFrame,
    SentUnreliable,
    FinishSender,
    CancelSender,
    AckReliable,
    AckNackUnreliable,
    CloseReceiver,
    ForgetChannel,
    Dequeued,
)
ALL_FRAMES = (*PREFIX_FRAMES, RouteTo, *ROUTED_FRAMES)

_VERSION_HEAD = bytes.fromhex("ef505fa6600f408e") + b"AQUEDUCT"
_MAGIC_REST = _VERSION_HEAD[1:]  # what follows the tag byte
_VERSION_RAW = VERSION_STRING.encode()
_VERSION_FRAME = _VERSION_HEAD + encode_varint(len(_VERSION_RAW)) + _VERSION_RAW


def check_ack_reliable(ranges: tuple[int, ...]) -> None:
    """Rules of ACK_RELIABLE values: whole (gap, ack) pairs, at least one, zeros only first."""
    if not ranges:
        raise FrameError("ACK_RELIABLE", "needs at least one (gap, ack-length) pair")
    if len(ranges) & 1:
        raise FrameError("ACK_RELIABLE", "values must come in (gap, ack-length) pairs")
    if 0 in ranges[1:]:
        if ranges.index(0, 1) & 1:
            raise FrameError("ACK_RELIABLE", "range lengths must be non-zero")
        raise FrameError("ACK_RELIABLE", "gaps after the first must be non-zero")


def check_ack_nack(ranges: tuple[int, ...]) -> None:
    """Rules of ACK_NACK_UNRELIABLE values: at least one, zero only as the leading value."""
    if not ranges:
        raise FrameError("ACK_NACK_UNRELIABLE", "needs at least one value")
    if 0 in ranges[1:]:
        raise FrameError("ACK_NACK_UNRELIABLE", "only a leading value may be zero")


def _encode_varint_list(tag: bytes, values: tuple[int, ...]) -> bytes:
    body = b"".join([encode_varint(v) for v in values])
    return tag + encode_varint(len(body)) + body


def encode_frame(f: Frame) -> bytes:
    """Encode one frame; a value the wire cannot carry raises ``FrameError``."""
    try:
        return f._encode()
    except FrameError:
        raise
    except WireError as e:
        raise FrameError(f.NAME, str(e)) from None


# ---------------------------------------------------------------- decoding
# Each body reader takes (buf, pos just after the tag, limits) and returns
# (frame, new pos). Primitive readers raise plain WireError; read_frame adds
# the frame name.

_ACK_VERSION = AckVersion()
_CANCEL_SENDER = CancelSender()
_CLOSE_RECEIVER = CloseReceiver()
_FORGET_CHANNEL = ForgetChannel()
_VERSION = Version()


def _read_version(buf: Buffer, pos: int, limits: Limits) -> tuple[Version, int]:
    end = pos + len(_MAGIC_REST)
    if end > len(buf):
        raise IncompleteData("magic bytes end mid-way", end)
    if buf[pos:end] != _MAGIC_REST:
        raise FrameError("VERSION", "magic bytes differ from ef 50 5f a6 60 0f 40 8e 'AQUEDUCT'")
    raw, pos = read_varbytes(buf, end, limits.max_header_bytes, "version string")
    if raw != _VERSION_RAW:
        peer = raw.decode("utf-8", "backslashreplace")
        raise FrameError(
            "VERSION", f"version mismatch: peer speaks {peer}, we speak {VERSION_STRING}"
        )
    return _VERSION, pos


def _read_ack_version(buf: Buffer, pos: int, limits: Limits) -> tuple[AckVersion, int]:
    return _ACK_VERSION, pos


def _read_connection_headers(
    buf: Buffer, pos: int, limits: Limits
) -> tuple[ConnectionHeaders, int]:
    headers, pos = read_headers(buf, pos, limits.max_header_bytes)
    return ConnectionHeaders(headers), pos


def _read_route_to(buf: Buffer, pos: int, limits: Limits) -> tuple[RouteTo, int]:
    chanid, pos = read_varint(buf, pos)
    return RouteTo(chanid), pos


def _read_attachments(buf: Buffer, pos: int, end: int, limits: Limits) -> tuple[AttachmentRef, ...]:
    """Parse (chanid, header data)* filling exactly buf[pos:end]."""
    atts = []
    try:
        while pos < end:
            chanid, pos = read_varint(buf, pos)
            headers, pos = read_headers(buf, pos, limits.max_header_bytes)
            if pos > end:
                break
            atts.append(AttachmentRef(chanid, headers))
        else:
            return tuple(atts)
    except IncompleteData:
        pass
    raise FrameError("MESSAGE", "an attachment runs past the end of ATTACHMENTS")


def _read_message(buf: Buffer, pos: int, limits: Limits) -> tuple[MessageFrame, int]:
    """MESSAGE body. The one frame read per message, so one-byte varints and
    empty ATTACHMENTS are read inline; everything else takes the general readers."""
    try:
        num = buf[pos]
        if num < 0x80:
            pos += 1
        elif buf[pos + 1] < 0x80:  # numbers 128..16383: two bytes
            num = (num & 0x7F) | (buf[pos + 1] << 7)
            pos += 2
        else:
            num, pos = read_varint(buf, pos)
        if buf[pos]:
            headers, pos = read_headers(buf, pos, limits.max_header_bytes)
        else:
            headers = ()
            pos += 1
        n = buf[pos]
        if n:
            atts, pos = _read_attachments_field(buf, pos, limits)
        else:
            atts = ()
            pos += 1
        n = buf[pos]
    except IndexError:
        raise IncompleteData("varint ends mid-way") from None
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_varint(buf, pos)
    if n > limits.max_payload_bytes:
        raise WireError(f"payload length {n} exceeds the limit of {limits.max_payload_bytes} bytes")
    end = pos + n
    if end > len(buf):
        raise IncompleteData(f"payload length {n}, only {len(buf) - pos} bytes present", end)
    return MessageFrame(num, headers, atts, bytes(buf[pos:end])), end


def read_plain_messages(
    buf: Buffer, pos: int, max_payload: int
) -> tuple[int, list[bytes], list[int], int]:
    """A run of plain MESSAGE frames at ``pos``: ``(first num, payloads, frame lengths, end)``.

    Plain: no headers, no attachments, minimal varints, each number one more
    than the previous. That is what an ORDERED sender writes for
    ``bytes``/CBOR values, so a receiver can take a whole chunk of stream
    data in one call, without a frame object per message. The run stops,
    leaving ``end`` at the start of that frame, at anything else (another
    frame, a number out of sequence, an incomplete frame, a payload over
    ``max_payload``): the general decoder reads or rejects it. A frame's
    length equals ``message_cost`` because its varints are minimal (a
    multi-byte varint is minimal when its last byte is not zero).
    """
    end = len(buf)
    payloads: list[bytes] = []
    costs: list[int] = []
    first = expect = -1
    try:
        while pos + 5 <= end and buf[pos] == 0x04:
            p = pos + 1
            num = buf[p]
            if num < 0x80:
                p += 1
            else:  # 2 and 3 bytes inline: numbers up to 2^21 (read_varint beyond)
                b1 = buf[p + 1]
                if 0 < b1 < 0x80:
                    num = (num & 0x7F) | (b1 << 7)
                    p += 2
                elif b1 >= 0x80 and 0 < buf[p + 2] < 0x80:
                    num = (num & 0x7F) | ((b1 & 0x7F) << 7) | (buf[p + 2] << 14)
                    p += 3
                else:
                    num, p = read_varint(buf, p)
                    if not buf[p - 1]:
                        break
            if num != expect and expect >= 0:
                break
            if buf[p] or buf[p + 1]:  # headers or attachments
                break
            n = buf[p + 2]
            if n < 0x80:
                p += 3
            else:
                n, p = read_varint(buf, p + 2)
                if not buf[p - 1]:
                    break
            stop = p + n
            if stop > end or n > max_payload:
                break
            payloads.append(bytes(buf[p:stop]))
            costs.append(stop - pos)
            if expect < 0:
                first = num
            expect = num + 1
            pos = stop
    except (IncompleteData, IndexError):  # the last frame is cut short: the decoder keeps it
        pass
    return first, payloads, costs, pos


def _read_attachments_field(
    buf: Buffer, pos: int, limits: Limits
) -> tuple[tuple[AttachmentRef, ...], int]:
    """The ATTACHMENTS varbytes of a MESSAGE (its length is non-zero)."""
    n, pos = read_varint(buf, pos)
    if n > limits.max_payload_bytes:
        raise FrameError(
            "MESSAGE",
            f"ATTACHMENTS length {n} exceeds the limit of {limits.max_payload_bytes} bytes",
        )
    end = pos + n
    if end > len(buf):
        raise IncompleteData(f"ATTACHMENTS length {n}, only {len(buf) - pos} bytes present", end)
    return _read_attachments(buf, pos, end, limits), end


def _read_sent_unreliable(buf: Buffer, pos: int, limits: Limits) -> tuple[SentUnreliable, int]:
    count, pos = read_varint(buf, pos)
    if not count:
        raise FrameError("SENT_UNRELIABLE", "COUNT must be > 0")
    return SentUnreliable(count), pos


def _read_finish_sender(buf: Buffer, pos: int, limits: Limits) -> tuple[FinishSender, int]:
    total, pos = read_varint(buf, pos)
    return FinishSender(total), pos


def _read_cancel_sender(buf: Buffer, pos: int, limits: Limits) -> tuple[CancelSender, int]:
    return _CANCEL_SENDER, pos


def _read_varint_list(
    buf: Buffer, pos: int, limits: Limits, name: str
) -> tuple[tuple[int, ...], int]:
    """A varbytes whose content is exactly a run of varints."""
    n, pos = read_varint(buf, pos)
    if n > limits.max_payload_bytes:
        raise FrameError(
            name, f"ranges length {n} exceeds the limit of {limits.max_payload_bytes} bytes"
        )
    end = pos + n
    if end > len(buf):
        raise IncompleteData(f"ranges length {n}, only {len(buf) - pos} bytes present", end)
    values = []
    try:
        while pos < end:
            v, pos = read_varint(buf, pos)
            values.append(v)
    except IncompleteData:
        pos = end + 1
    if pos > end:
        raise FrameError(name, "a varint runs past the end of the ranges")
    return tuple(values), end


def _read_ack_reliable(buf: Buffer, pos: int, limits: Limits) -> tuple[AckReliable, int]:
    ranges, pos = _read_varint_list(buf, pos, limits, "ACK_RELIABLE")
    check_ack_reliable(ranges)
    return AckReliable(ranges), pos


def _read_ack_nack(buf: Buffer, pos: int, limits: Limits) -> tuple[AckNackUnreliable, int]:
    ranges, pos = _read_varint_list(buf, pos, limits, "ACK_NACK_UNRELIABLE")
    check_ack_nack(ranges)
    return AckNackUnreliable(ranges), pos


def _read_close_receiver(buf: Buffer, pos: int, limits: Limits) -> tuple[CloseReceiver, int]:
    return _CLOSE_RECEIVER, pos


def _read_forget_channel(buf: Buffer, pos: int, limits: Limits) -> tuple[ForgetChannel, int]:
    return _FORGET_CHANNEL, pos


def _read_dequeued(buf: Buffer, pos: int, limits: Limits) -> tuple[Dequeued, int]:
    n, pos = read_varint(buf, pos)
    if not n:
        raise FrameError("DEQUEUED", "NUM_BYTES must be > 0")
    return Dequeued(n), pos


_READERS = {
    Version: _read_version,
    AckVersion: _read_ack_version,
    ConnectionHeaders: _read_connection_headers,
    RouteTo: _read_route_to,
    MessageFrame: _read_message,
    SentUnreliable: _read_sent_unreliable,
    FinishSender: _read_finish_sender,
    CancelSender: _read_cancel_sender,
    AckReliable: _read_ack_reliable,
    AckNackUnreliable: _read_ack_nack,
    CloseReceiver: _read_close_receiver,
    ForgetChannel: _read_forget_channel,
    Dequeued: _read_dequeued,
}
# Indexed by tag byte: a list lookup beats a dict on the hot path.
FRAME_BY_TAG: list[type | None] = [None] * 256
_READER_BY_TAG: list = [None] * 256
for _cls, _reader in _READERS.items():
    FRAME_BY_TAG[_cls.TAG] = _cls
    _READER_BY_TAG[_cls.TAG] = _reader


def frame_name(tag: int) -> str:
    """NAME of the frame with this tag, or ``"UNKNOWN"``."""
    cls = FRAME_BY_TAG[tag]
    return cls.NAME if cls is not None else "UNKNOWN"


def read_frame(buf: Buffer, pos: int, limits: Limits = DEFAULT_LIMITS) -> tuple[Frame, int]:
    """Decode the frame at ``pos``; ``IncompleteData`` if the buffer ends inside it.

    For incremental decoders. The tag byte at ``pos`` must exist.
    """
    tag = buf[pos]
    reader = _READER_BY_TAG[tag]
    if reader is None:
        raise FrameError("UNKNOWN", f"tag {tag} is not a frame")
    try:
        return reader(buf, pos + 1, limits)
    except FrameError:
        raise
    except WireError as e:
        raise FrameError(FRAME_BY_TAG[tag].NAME, str(e)) from None


def read_message(buf: Buffer, pos: int, limits: Limits = DEFAULT_LIMITS) -> tuple[MessageFrame, int]:
    """``read_frame`` for a MESSAGE whose tag byte is at ``pos - 1`` (the stream decoder's fast path)."""
    try:
        return _read_message(buf, pos, limits)
    except FrameError:
        raise
    except WireError as e:
        raise FrameError("MESSAGE", str(e)) from None


def decode_frame(buf: Buffer, pos: int = 0, limits: Limits = DEFAULT_LIMITS) -> tuple[Frame, int]:
    """Decode one whole frame at ``pos``: (frame, new pos). Truncation is a ``FrameError``."""
    if pos >= len(buf):
        raise FrameError("FRAME", f"no frame tag at offset {pos}: input ends")
    try:
        return read_frame(buf, pos, limits)
    except IncompleteData as e:
        raise FrameError(frame_name(buf[pos]), e.rule) from None


def __getattr__(name: str) -> Any:
    """``Message``, the MESSAGE frame's class name until it took one of its own: works, and warns."""
    if name == "Message":
        return moved_name(__name__, name, __name__, "MessageFrame")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
