"""Frame sequences (spec section 1): incremental stream decoding, datagrams, encoding.

Every stream and datagram carries ``(VERSION | ACK_VERSION | CONNECTION_HEADERS)*
[ROUTE_TO routed*]``. The grammar is checked on the tag byte, before the body
is read, so a misplaced frame fails at once instead of being buffered.

``StreamSequenceDecoder`` accepts bytes in arbitrary chunks. When its buffer
is empty (the common case: QUIC delivers whole frames) it parses the chunk in
place; only the unfinished tail of a frame is copied into a ``bytearray``.
When a frame waits for a body of known length it records how many bytes are
needed and does not re-parse before they are there, so a large MESSAGE
arriving in many small chunks costs O(n), not O(n^2).
"""

from __future__ import annotations

from collections.abc import Iterable

from aqueduct.wire.errors import FrameError, IncompleteData, WireError
from aqueduct.wire.frames import (
    DEFAULT_LIMITS,
    FRAME_BY_TAG,
    PREFIX_FRAMES,
    ROUTED_FRAMES,
    Frame,
    Limits,
    MessageFrame,
    RouteTo,
    Version,
    encode_frame,
    frame_name,
    read_frame,
    read_message,
)

__all__ = ["Limits", "StreamSequenceDecoder", "decode_datagram", "encode_sequence"]

_PREFIX, _ROUTE, _ROUTED = 0, 1, 2
_MESSAGE_TAG = MessageFrame.TAG
_ROUTE_TAG = RouteTo.TAG
_KIND_BY_TAG: list[int | None] = [None] * 256
for _cls in PREFIX_FRAMES:
    _KIND_BY_TAG[_cls.TAG] = _PREFIX
for _cls in ROUTED_FRAMES:
    _KIND_BY_TAG[_cls.TAG] = _ROUTED
_KIND_BY_TAG[RouteTo.TAG] = _ROUTE


def _check_grammar(tag: int, routed: bool) -> bool:
    """Check that a frame with ``tag`` may come next; return the new routed state."""
    kind = _KIND_BY_TAG[tag]
    if kind == _ROUTED:
        if not routed:
            raise FrameError("sequence", f"{frame_name(tag)} outside a ROUTE_TO context")
        return True
    if kind == _PREFIX:
        if routed:
            raise FrameError(
                "sequence", f"{frame_name(tag)} after ROUTE_TO (prefix frames come first)"
            )
        return False
    if kind == _ROUTE:
        if routed:
            raise FrameError("sequence", "a second ROUTE_TO (at most one per sequence)")
        return True
    raise FrameError("UNKNOWN", f"tag {tag} is not a frame")


class StreamSequenceDecoder:
    """Decode the frame sequence of one stream from chunks of any size.

    ``feed`` returns the frames completed by the chunk; ``end`` is called at
    FIN and fails if a frame is cut short. After an error the decoder stays
    failed: every later call raises the same error.
    """

    __slots__ = ("_limits", "_buf", "_need", "_routed", "_error")

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self._limits = limits
        self._buf = bytearray()  # unfinished tail of a frame, if any
        self._need = 0  # do not re-parse before the buffer holds this many bytes
        self._routed = False
        self._error: WireError | None = None

    def routed_input(self, data: bytes) -> bytes | bytearray | None:
        """Hand the caller the next routed bytes to read itself, or None to ``feed`` them.

        For a reader of whole frames in place (``read_plain_messages``): inside
        a ROUTE_TO context, the buffered tail of a frame joined with ``data``
        (the decoder forgets it; what the reader leaves goes back through
        ``feed``). None outside a ROUTE_TO context, after an error, or while
        the buffered frame is still incomplete (joining then would copy a
        large frame once per chunk).
        """
        if not self._routed or self._error is not None:
            return None
        buf = self._buf
        if not buf:
            return data
        if len(buf) + len(data) < self._need:
            return None
        self._buf = bytearray()
        self._need = 0
        buf += data
        return buf

    def feed(self, data: bytes) -> list[Frame]:
        """Add bytes; return every frame they complete, in order."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        if buf:
            buf += data
            if len(buf) < self._need:
                return []
            src = buf
        else:
            src = data
        frames: list[Frame] = []
        with memoryview(src) as mv:
            try:
                pos = self._parse(mv, frames)
            except WireError as e:
                self._error = e
                raise
            if src is not buf and pos < len(mv):
                self._buf = bytearray(mv[pos:])
        if src is buf:
            del buf[:pos]  # O(1) for a prefix; the view is released by now
        return frames

    def _parse(self, mv: memoryview, frames: list[Frame]) -> int:
        """Append whole frames of ``mv`` to ``frames``; return where the unfinished tail starts."""
        pos = 0
        n = len(mv)
        routed = self._routed
        limits = self._limits
        append = frames.append
        try:
            while pos < n:
                tag = mv[pos]
                if tag == _MESSAGE_TAG and routed:  # the common frame: no grammar step
                    frame, pos = read_message(mv, pos + 1, limits)
                    append(frame)
                    continue
                routed_after = _check_grammar(tag, routed)
                frame, pos_after = read_frame(mv, pos, limits)
                append(frame)
                routed = routed_after
                pos = pos_after
            self._need = 0
        except IncompleteData as e:
            self._need = (e.need - pos) if e.need is not None else (n - pos + 1)
        self._routed = routed
        return pos

    def end(self) -> None:
        """The stream ended (FIN): a buffered partial frame is an error."""
        if self._error is not None:
            raise self._error
        if not self._buf:
            return
        with memoryview(self._buf) as mv:
            tag = mv[0]
            try:  # the tail is always an unfinished frame: feed parses all it can
                read_frame(mv, 0, self._limits)
            except IncompleteData as e:
                self._error = FrameError(frame_name(tag), e.rule)
        raise self._error


def decode_datagram(data: bytes, limits: Limits = DEFAULT_LIMITS) -> list[Frame]:
    """Decode a datagram: exactly ``[VERSION] ROUTE_TO MESSAGE``, nothing after."""
    n = len(data)
    if n > 2 and data[0] == _ROUTE_TAG and data[1] < 0x80 and data[2] == _MESSAGE_TAG:
        # The common shape (no VERSION, one-byte chanid), without the grammar walk.
        try:
            msg, pos = read_message(data, 3, limits)
        except IncompleteData as e:
            raise FrameError("MESSAGE", e.rule) from None
        if pos < n:
            raise FrameError("datagram", f"{n - pos} bytes after the MESSAGE")
        return [RouteTo(data[1]), msg]
    frames: list[Frame] = []
    pos = 0
    with memoryview(data) as mv:
        n = len(mv)
        expected = _DATAGRAM_WITH_VERSION if n and mv[0] == Version.TAG else _DATAGRAM
        for cls in expected:
            if pos >= n:
                raise FrameError("datagram", f"ends before {cls.NAME} ({_DATAGRAM_GRAMMAR})")
            tag = mv[pos]
            if tag != cls.TAG:
                got = frame_name(tag) if FRAME_BY_TAG[tag] is not None else f"tag {tag}"
                raise FrameError(
                    "datagram", f"expected {cls.NAME}, got {got} ({_DATAGRAM_GRAMMAR})"
                )
            try:
                frame, pos = read_frame(mv, pos, limits)
            except IncompleteData as e:
                raise FrameError(cls.NAME, e.rule) from None
            frames.append(frame)
        if pos < n:
            raise FrameError("datagram", f"{n - pos} bytes after the MESSAGE")
    return frames


_DATAGRAM = (RouteTo, MessageFrame)
_DATAGRAM_WITH_VERSION = (Version, RouteTo, MessageFrame)
_DATAGRAM_GRAMMAR = "a datagram is [VERSION] ROUTE_TO MESSAGE"


def encode_sequence(frames: Iterable[Frame]) -> bytes:
    """Encode frames as one sequence; raises ``FrameError`` if they break the grammar."""
    routed = False
    parts = []
    for f in frames:
        routed = _check_grammar(f.TAG, routed)
        parts.append(encode_frame(f))
    return b"".join(parts)
