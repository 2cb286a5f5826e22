"""Tokens whose signature was verified already: a reconnecting producer skips the Ed25519 check.

A fleet reconnecting at once after a bridge restart presents the same
tokens again and again; the signature check is the cost of a token
(about 160 µs, ``bench/token_cost.py``), the rest is microseconds. This
cache remembers, per exact token text, the claims a signature check
passed under a given :class:`~aqueduct.auth.keys.KeyRing`: a hit skips
only the signature. Revocation, issued-at and expiry are checked on every
use, and a changed key file (another ring) misses, so a removed key stops
admitting at once. Bounded: the least recently used tokens go first.
"""

from __future__ import annotations

from collections import OrderedDict

from aqueduct.auth.keys import KeyRing

__all__ = ["MAX_VERIFIED", "VerifiedTokens"]

MAX_VERIFIED = 16_384
"""Tokens remembered at most (a few hundred bytes each): a fleet of thousands fits."""


class VerifiedTokens:
    """Exact token text -> the claims it carried when its signature verified, under which key ring."""

    def __init__(self, limit: int = MAX_VERIFIED) -> None:
        self.limit = limit
        self._entries: OrderedDict[bytes, tuple[KeyRing, object]] = OrderedDict()
        self.hits = 0  #: signature checks skipped

    def get(self, token: bytes, keys: KeyRing) -> object | None:
        """The claims ``token`` was verified with under ``keys`` (this very ring), or None."""
        entry = self._entries.get(token)
        if entry is None or entry[0] is not keys:
            return None
        self._entries.move_to_end(token)
        self.hits += 1
        return entry[1]

    def put(self, token: bytes, keys: KeyRing, claims: object) -> None:
        """Remember that ``token``'s signature verified under ``keys``, carrying ``claims``."""
        self._entries[token] = (keys, claims)
        self._entries.move_to_end(token)
        if len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
