"""Everything the core wants to put on the wire, batched until ``transmit()``.

Channels write frames through this one object, so batching lives in one
place: all bytes written to a stream between two ``transmit()`` calls leave as
one ``StreamDataQueued`` (joined once), which is what keeps small messages
cheap. It also owns the QUIC stream id counter (client-initiated
unidirectional ids are 2, 6, 10, ...; server ones 3, 7, 11, ...) and the
handshake prefix every new sequence starts with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

from aqueduct.proto.config import FrameLog
from aqueduct.proto.events import (
    Action,
    ConnectionCloseQueued,
    DatagramQueued,
    StreamDataQueued,
    StreamResetQueued,
)
from aqueduct.wire.frames import Frame
from aqueduct.wire.sequence import StreamSequenceDecoder
from aqueduct.wire.varint import encode_varint

RESET_CANCELLED = 1
RESET_LOST = 2


def route_to(chanid: int) -> bytes:
    """Encoded ROUTE_TO (tag 3)."""
    return b"\x03" + encode_varint(chanid)


def frame_record(direction: str, where: str, frame: Frame) -> dict:
    """A JSON-friendly dict for the frame log: payloads are summarised by their length."""
    rec: dict = {"direction": direction, "where": where, "frame": frame.NAME}
    for f in fields(frame):
        value = getattr(frame, f.name)
        if f.name == "payload":
            rec["payload_len"] = len(value)
        elif f.name in ("headers", "attachments"):
            rec[f.name] = repr(value)
        else:
            rec[f.name] = value
    return rec


class Output:
    """Pending stream bytes, FINs, resets, datagrams and the close, in transmit order."""

    def __init__(self, is_client: bool, prefix: Callable[[], bytes], log: FrameLog | None) -> None:
        self._next_id = 2 if is_client else 3
        self._prefix = prefix
        self.log = log
        self._chunks: dict[int, list[bytes]] = {}
        self._fin: set[int] = set()
        self._other: list[Action] = []
        self.streams_opened = 0

    def open(self, chanid: int | None = None) -> int:
        """Start a new sequence: a fresh stream id, the handshake prefix and ROUTE_TO ``chanid``."""
        sid = self._next_id
        self._next_id += 4
        self.streams_opened += 1
        head = self._prefix()
        if chanid is not None:
            head += route_to(chanid)
        if self.log is not None and head:
            for frame in StreamSequenceDecoder().feed(head):
                self.log(frame_record("sent", f"stream {sid}", frame))
        self._chunks[sid] = [head] if head else []
        return sid

    def write(self, sid: int, data: bytes) -> None:
        """Append encoded frame bytes to stream ``sid``."""
        chunks = self._chunks.get(sid)
        if chunks is None:
            self._chunks[sid] = [data]
        else:
            chunks.append(data)

    def write_chunks(self, sid: int, chunks: list[bytes]) -> None:
        """Append several pieces of encoded frames to stream ``sid`` (joined once, at transmit)."""
        pending = self._chunks.get(sid)
        if pending is None:
            self._chunks[sid] = chunks
        else:
            pending.extend(chunks)

    def write_frame(self, sid: int, frame: Frame, data: bytes) -> None:
        """Append an encoded frame, logging it when the frame log is on."""
        self.write(sid, data)
        if self.log is not None:
            self.log(frame_record("sent", f"stream {sid}", frame))

    def finish(self, sid: int) -> None:
        """Send FIN after the pending bytes of ``sid``."""
        self._chunks.setdefault(sid, [])
        self._fin.add(sid)

    def reset(self, sid: int, code: int) -> None:
        """Reset ``sid``; bytes not yet handed out are dropped."""
        self._chunks.pop(sid, None)
        self._fin.discard(sid)
        self._other.append(StreamResetQueued(sid, code))

    def datagram(self, data: bytes) -> None:
        self._other.append(DatagramQueued(data))

    def close(self, code: int, reason: str) -> None:
        self._other.append(ConnectionCloseQueued(code, reason))

    @property
    def pending(self) -> bool:
        """Something is queued for the next ``drain``."""
        return bool(self._chunks or self._other)

    def drain(self) -> list[Action]:
        """Everything queued since the last call, one ``StreamDataQueued`` per stream."""
        if not self._chunks and not self._other:
            return []  # the common case: the runtime flushes after every UDP datagram
        actions: list[Action] = []
        fin = self._fin
        for sid, chunks in self._chunks.items():
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            end = sid in fin
            if data or end:
                actions.append(StreamDataQueued(sid, data, end))
        self._chunks = {}
        fin.clear()
        if self._other:
            actions.extend(self._other)
            self._other = []
        return actions
