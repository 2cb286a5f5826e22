"""The handshake of spec section 4, as one small state holder.

* Until we received ACK_VERSION, every sequence we start (datagrams too)
  begins with VERSION.
* On the first VERSION received we owe one ACK_VERSION; it rides on the next
  sequence we start (the connection opens a bare stream for it if nothing
  else starts before the next ``transmit()``). We count it as sent from that
  moment, so a sequence without VERSION is a violation only before any
  VERSION reached us: the peer drops VERSION only after our ACK_VERSION.
* CONNECTION_HEADERS: the client sends its own first thing, the server
  answers once the client's arrived; each side's goes on its next sequence.
  Routed frames are processed only after the peer's CONNECTION_HEADERS.
"""

from __future__ import annotations

from aqueduct.proto.errors import RemoteProtocolError
from aqueduct.wire.frames import AckVersion, ConnectionHeaders, Frame, Version, encode_frame
from aqueduct.wire.varint import Headers

_VERSION = encode_frame(Version())
_ACK_VERSION = encode_frame(AckVersion())


class Handshake:
    """Which prefix frames we still owe, and what we know about the peer."""

    __slots__ = ("got_version", "got_ack_version", "ack_owed", "headers_owed", "headers_sent", "peer_headers", "_headers")

    def __init__(self, headers: Headers) -> None:
        self.got_version = False
        self.got_ack_version = False
        self.ack_owed = False
        self.headers_owed = False
        self.headers_sent = False
        self.peer_headers: Headers | None = None
        self._headers = encode_frame(ConnectionHeaders(headers))

    @property
    def done(self) -> bool:
        """Routed frames from the peer may be processed."""
        return self.peer_headers is not None

    @property
    def owes_prefix(self) -> bool:
        """A prefix frame is waiting for the next sequence we start."""
        return self.ack_owed or self.headers_owed

    def prefix(self) -> bytes:
        """Prefix of a new stream sequence; hands out owed frames exactly once."""
        out = b"" if self.got_ack_version else _VERSION
        if self.ack_owed:
            self.ack_owed = False
            out += _ACK_VERSION
        if self.headers_owed:
            self.headers_owed = False
            self.headers_sent = True
            out += self._headers
        return out

    def datagram_prefix(self) -> bytes:
        """A datagram carries only ``[VERSION]``."""
        return b"" if self.got_ack_version else _VERSION

    def send_headers(self) -> None:
        """Our CONNECTION_HEADERS go out on the next sequence (once)."""
        if not self.headers_sent:
            self.headers_owed = True

    def sequence_started(self, first: Frame) -> None:
        """Check the first frame of an incoming sequence."""
        if not self.got_version and not isinstance(first, Version):
            raise RemoteProtocolError(
                f"{first.NAME}: a sequence must start with VERSION until ACK_VERSION was sent"
            )

    def version_received(self) -> None:
        if not self.got_version:
            self.got_version = True
            self.ack_owed = True

    def ack_version_received(self) -> None:
        self.got_ack_version = True

    def headers_received(self, headers: Headers) -> None:
        if self.peer_headers is not None:
            raise RemoteProtocolError("CONNECTION_HEADERS: sent twice (each side sends it once)")
        self.peer_headers = headers
