"""A cursor over one frame body, shared by the connector's wire and Wallaroo's v3 wire.

Both wires frame their bodies the same way (big-endian integers, strings
behind a u16 length), and every short or malformed read must name the
frame and the field, because that text is the ERROR reason sent to the
peer. The two wires differ only in the error class they raise, so the
reader takes it as a parameter instead of being written twice.
"""

from __future__ import annotations


class BodyReader:
    """Cursor over one frame body; every short read names the frame and field."""

    __slots__ = ("frame", "data", "pos", "error")

    def __init__(self, frame: str, data: bytes, error: type[ValueError]) -> None:
        self.frame = frame
        self.data = data
        self.pos = 0
        self.error = error  # the wire's frame error: its str() is the ERROR reason

    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int, field: str) -> bytes:
        if self.left() < n:
            raise self.error(f"{self.frame}: body ends inside {field} (needs {n} bytes, {self.left()} left)")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def number(self, n: int, field: str, signed: bool = False) -> int:
        """A big-endian integer of ``n`` bytes."""
        return int.from_bytes(self.take(n, field), "big", signed=signed)

    def u16(self, field: str) -> int:
        return self.number(2, field)

    def u32(self, field: str) -> int:
        return self.number(4, field)

    def u64(self, field: str) -> int:
        return self.number(8, field)

    def short(self, field: str) -> bytes:
        """Bytes behind a u16 length."""
        return self.take(self.u16(f"{field} length"), field)

    def text(self, field: str) -> str:
        """UTF-8 text behind a u16 length."""
        try:
            return self.short(field).decode()
        except UnicodeDecodeError:
            raise self.error(f"{self.frame}: {field} is not valid UTF-8") from None

    def rest(self) -> bytes:
        chunk = self.data[self.pos :]
        self.pos = len(self.data)
        return chunk

    def end(self) -> None:
        if self.left():
            raise self.error(f"{self.frame}: {self.left()} trailing byte(s) after the body")
