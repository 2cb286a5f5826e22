"""Errors of the wire layer.

Every malformed input surfaces as a ``WireError`` (a ``ValueError``), never as
an ``IndexError`` or ``UnicodeDecodeError`` leaking out of the parser: the
protocol layer turns it into a PROTOCOL_VIOLATION close whose reason is the
message, so the message must name the frame and the rule it broke.
"""

from __future__ import annotations


class WireError(ValueError):
    """Bytes that do not follow the Aqueduct wire format (or values that cannot be encoded)."""


class FrameError(WireError):
    """A frame broke a rule; ``str()`` reads ``"<FRAME>: <rule>"``."""

    def __init__(self, frame: str, rule: str) -> None:
        super().__init__(f"{frame}: {rule}")
        self.frame = frame
        self.rule = rule


class IncompleteData(Exception):
    """The buffer ended inside a frame: an incremental decoder should wait for more bytes.

    Internal: the public decoders turn it into a ``FrameError`` when no more
    bytes can come. ``rule`` says what was cut short (it becomes the error
    message at end of input); ``need`` is the buffer length that must be
    reached before retrying makes sense (``None`` = at least one more byte).
    Not a ``WireError`` on purpose: waiting is not a violation.
    """

    def __init__(self, rule: str, need: int | None = None) -> None:
        super().__init__(rule)
        self.rule = rule
        self.need = need
