"""Flow control (spec section 4, DEQUEUED): what a MESSAGE costs, the send window, the report.

A MESSAGE costs its encoded frame length. The sender may transmit while
``outstanding + cost <= W0`` or when nothing is outstanding (so one oversized
message never deadlocks); ``outstanding`` falls with DEQUEUED reports and with
nacks. The receiver batches what its application dequeued into DEQUEUED
frames: at once when W0/4 bytes are unreported, else 50 ms after the first
unreported byte. Both halves are tiny classes so the window arithmetic is
tested once and never re-derived inside the channel machines.
"""

from __future__ import annotations

from aqueduct.wire.frames import AttachmentRef, MessageFrame
from aqueduct.wire.varint import Headers, encode_headers, encode_varint, varint_len


def _vlen(n: int) -> int:
    """``varint_len`` for the small values of the hot path."""
    if n < 0x80:
        return 1
    if n < 0x4000:
        return 2
    if n < 0x200000:
        return 3
    return varint_len(n)


def headers_len(headers: Headers) -> int:
    """Encoded length of header data, computed without encoding it.

    Memoised like ``encode_headers``: received messages share the header
    tuples the decoder cached, so a hit is one dict lookup per message.
    """
    if not headers:
        return 1
    try:
        n = _HEADERS_LEN.get(headers)
    except TypeError:  # an unhashable value: compute, never cache
        return _headers_len(headers)
    if n is None:
        n = _headers_len(headers)
        if len(_HEADERS_LEN) < 256:
            _HEADERS_LEN[headers] = n
    return n


def _headers_len(headers: Headers) -> int:
    inner = 0
    for key, value in headers:
        inner += varint_len(len(key)) + len(key) + varint_len(len(value)) + len(value)
    return varint_len(inner) + inner


_HEADERS_LEN: dict[Headers, int] = {}


def message_cost(msg: MessageFrame) -> int:
    """Encoded length of a MESSAGE frame (its flow-control cost), minimal varints assumed.

    The receiver gets a decoded frame, not its bytes, so it recomputes the
    length; the sender measures the bytes it actually wrote, which are
    minimal, so both sides agree.
    """
    n = len(msg.payload)
    if not msg.attachments:  # the common case, kept cheap: tag + num + headers + 0 + len
        return 2 + _vlen(msg.num) + headers_len(msg.headers) + _vlen(n) + n
    atts = 0
    for att in msg.attachments:
        atts += varint_len(att.chanid) + headers_len(att.headers)
    return (
        1
        + varint_len(msg.num)
        + headers_len(msg.headers)
        + varint_len(atts)
        + atts
        + varint_len(n)
        + n
    )


def message_head(num: int, headers: Headers, attachments: tuple[AttachmentRef, ...], payload_len: int) -> bytes:
    """Everything of a MESSAGE frame before its payload bytes.

    Writing ``head`` and ``payload`` as two chunks lets the stream buffer
    join them once, instead of copying a large payload into a frame first.
    ``head + payload == encode_frame(MessageFrame(...))`` (tested).
    """
    if not attachments:
        if not headers:
            return b"".join((b"\x04", encode_varint(num), b"\x00\x00", encode_varint(payload_len)))
        return b"".join(
            (b"\x04", encode_varint(num), encode_headers(headers), b"\x00", encode_varint(payload_len))
        )
    blob = b"".join([encode_varint(a.chanid) + encode_headers(a.headers) for a in attachments])
    atts = encode_varint(len(blob)) + blob
    hdrs = encode_headers(headers)
    return b"\x04" + encode_varint(num) + hdrs + atts + encode_varint(payload_len)


class SendWindow:
    """Sender side: byte credit of one channel."""

    __slots__ = ("limit", "outstanding")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.outstanding = 0

    def admits(self, cost: int) -> bool:
        """Whether a message of ``cost`` bytes may leave now."""
        return self.outstanding == 0 or self.outstanding + cost <= self.limit

    def sent(self, cost: int) -> None:
        self.outstanding += cost

    def released(self, nbytes: int) -> bool:
        """DEQUEUED or a nack returned ``nbytes``; False if that is more than was outstanding."""
        self.outstanding -= nbytes
        if self.outstanding < 0:
            self.outstanding = 0
            return False
        return True


class DequeueReporter:
    """Receiver side: dequeued bytes waiting for a DEQUEUED frame."""

    __slots__ = ("threshold", "delay", "unreported", "due")

    def __init__(self, window: int, delay: float) -> None:
        self.threshold = max(1, window // 4)
        self.delay = delay
        self.unreported = 0
        self.due: float | None = None

    def add(self, nbytes: int, now: float) -> bool:
        """Count dequeued bytes; True when a report should go out right away."""
        if nbytes <= 0:
            return False
        if not self.unreported:
            self.due = now + self.delay
        self.unreported += nbytes
        return self.unreported >= self.threshold

    def take(self) -> int:
        """The bytes to report now (0 if none); resets the timer."""
        n, self.unreported, self.due = self.unreported, 0, None
        return n
