"""Stateless resets (RFC 9000 section 10.3): a restarted server tells its old clients at once that they are gone.

A QUIC server that loses its state (a bridge SIGKILLed and restarted on the
same port) drops the packets of the connections it no longer knows; their
clients, hearing nothing, notice only at their idle timeout (10 s for a
producer), and every producer of a fleet waits that long before it even
starts reconnecting. A stateless reset ends that wait after one round
trip: the server answers a short-header packet of an unknown connection
with a packet ending in the connection id's *reset token*, which the
client learned during the handshake, and a client that sees its token
knows the connection is gone.

For the new process to know the old one's tokens without any state, a
token is a keyed hash of the connection id (section 10.3.2) under a secret
that survives the restart. :class:`ResetTokens` derives that secret from
the server's TLS private key, which a restarted bridge reads again from the
same file: no new file to keep, and as secret as what it protects (whoever
holds the key can impersonate the server anyway). A new key after a restart
only means the old clients fall back to their idle timeout.

The server's side needs no state: :meth:`ResetTokens.reset_for` builds the
answer to one packet. It is always shorter than that packet, so two
endpoints can never reset each other in a loop, and never an amplifier.
The client's side is :func:`token_of`: the last 16 bytes of a datagram that
could be a reset, to compare with the tokens the peer gave.

Pure bytes and hashing: the backends apply it. aioquic's own server draws
random tokens and its client ignores resets: the aioquic backend does both
(:mod:`~aqueduct.runtime.backends.quic_server`,
:class:`~aqueduct.runtime.backends.aioquic.AioquicTransport`). picoquic's
client checks resets itself (the aiopquic backend names the end it reports);
its server answers unknown connections with resets too, but under a secret
drawn anew by every process (aiopquic passes picoquic no reset seed), so a
restarted picoquic server's resets match no old token, and its clients
still wait for their idle timeout.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

STATELESS_RESET = "stateless reset: the server no longer knows this connection (it restarted)"
"""The reason a client's connection ended by the server's stateless reset gives, on every backend."""
TOKEN_SIZE = 16
MIN_RESET = 21
"""The shortest stateless reset (section 10.3): 5 bytes that pass for a short header and packet number, then the token."""
RESET_SIZE = 43
"""The size of the resets sent for longer packets: as long as the shortest packets a client sends with an
8-byte connection id, so a reset does not stand out by its size (section 10.3)."""
_LABEL = b"aqueduct stateless reset secret v1\x00"
_SHORT_HEADER_MASK = 0xC0  # header form (0: short) and fixed bit (1)
_SHORT_HEADER = 0x40


class ResetTokens:
    """The reset token of every connection id a server issues: ``HMAC-SHA256(secret, id)``, 16 bytes."""

    __slots__ = ("_secret",)

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("a reset secret needs at least 16 bytes")
        self._secret = secret

    @classmethod
    def from_key_file(cls, path: str | os.PathLike[str]) -> ResetTokens:
        """Tokens keyed by the server's private key file (PEM; a file holding the certificate too is fine).

        The same file after a restart gives the same tokens.
        """
        return cls(hashlib.sha256(_LABEL + Path(path).read_bytes()).digest())

    def token(self, cid: bytes) -> bytes:
        """The reset token of connection id ``cid``."""
        return hmac.new(self._secret, cid, hashlib.sha256).digest()[:TOKEN_SIZE]

    def reset_for(self, packet: bytes, cid: bytes) -> bytes | None:
        """The stateless reset answering ``packet`` (sent to connection id ``cid``), or None if it is too short to answer.

        One byte shorter than ``packet`` up to :data:`RESET_SIZE`: never
        larger than what triggered it (no loops between two endpoints, no
        amplification).
        """
        size = min(len(packet) - 1, RESET_SIZE)
        if size < MIN_RESET:
            return None
        unpredictable = bytearray(os.urandom(size - TOKEN_SIZE))
        unpredictable[0] = _SHORT_HEADER | (unpredictable[0] & ~_SHORT_HEADER_MASK & 0xFF)
        return bytes(unpredictable) + self.token(cid)


def token_of(datagram: bytes) -> bytes | None:
    """The token a datagram would carry if it were a stateless reset (its last 16 bytes), or None if it cannot be one."""
    if len(datagram) < MIN_RESET or datagram[0] & _SHORT_HEADER_MASK != _SHORT_HEADER:
        return None
    return datagram[-TOKEN_SIZE:]


__all__ = ["MIN_RESET", "RESET_SIZE", "STATELESS_RESET", "TOKEN_SIZE", "ResetTokens", "token_of"]
