"""The bridges a connector may send to: one URL, a list, or ``URL,URL,...``, each checked up front.

A producer given several bridges moves to the next one when its bridge is
lost (see :class:`~aqueduct.connector.producer.client.Connector`), so a URL
that cannot work must be found when the connector is built, not on the day
the first bridge dies. Every entry is checked here, and a bad one is named
with its place in the list (``bridge URL 2 of 3 'tcp://h:x': port must be an
integer 1-65535``) in one ``ValueError``: a user reading it knows which of
the URLs to fix without counting commas.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["SCHEMES", "BridgeAddress", "bridge_list"]

#: the transports a connector speaks: QUIC (Aqueduct) and plain TCP
SCHEMES = ("aqueduct", "tcp")
_SCHEME_HINT = "tcp://HOST:PORT or aqueduct://HOST:PORT"


@dataclass(frozen=True, slots=True)
class BridgeAddress:
    """One bridge's address, as given (``url``) and as a connection needs it."""

    url: str
    scheme: str  # one of SCHEMES
    host: str
    port: int


def bridge_list(urls: str | Sequence[str]) -> tuple[BridgeAddress, ...]:
    """Every bridge ``urls`` names, in order; a ``ValueError`` naming the first bad entry.

    ``urls`` is one URL, a sequence of them, or a string of them separated
    by commas (a sequence's entries may be such strings too); blanks around
    an entry are ignored. An empty entry, an unknown scheme, a missing host,
    a port that is not an integer 1-65535, anything after the port, and the
    same bridge twice are errors.
    """
    entries = [
        entry.strip()
        for item in ([urls] if isinstance(urls, str) else urls)
        for entry in item.split(",")
    ]
    if not entries:
        raise ValueError(f"no bridge URL given ({_SCHEME_HINT})")
    bridges: list[BridgeAddress] = []
    for place, entry in enumerate(entries, 1):
        where = f"bridge URL {place} of {len(entries)}" if len(entries) > 1 else "bridge URL"
        try:
            bridge = _parsed(entry)
            for earlier, seen in enumerate(bridges, 1):
                if (seen.scheme, seen.host, seen.port) == (bridge.scheme, bridge.host, bridge.port):
                    raise ValueError(f"the same bridge as URL {earlier}")
        except ValueError as exc:
            raise ValueError(f"{where} {entry!r}: {exc}") from None
        bridges.append(bridge)
    return tuple(bridges)


def _parsed(entry: str) -> BridgeAddress:
    """One entry as a :class:`BridgeAddress`; a ``ValueError`` saying what is wrong with it (not naming it)."""
    if not entry:
        raise ValueError(f"empty entry ({_SCHEME_HINT})")
    scheme, sep, _ = entry.partition("://")
    if not sep:
        raise ValueError(f"no scheme ({_SCHEME_HINT})")
    if scheme.lower() not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r} ({_SCHEME_HINT})")
    parts = urlsplit(entry)
    if parts.path or parts.query or parts.fragment or parts.username is not None:
        raise ValueError(f"only HOST:PORT may follow the scheme ({_SCHEME_HINT})")
    if not parts.hostname:
        raise ValueError(f"no host ({_SCHEME_HINT})")
    try:
        port = parts.port  # None when missing; ValueError when not a number or out of range
    except ValueError:
        port = 0
    if port is None:
        raise ValueError(f"no port ({_SCHEME_HINT})")
    if not 1 <= port <= 65535:
        raise ValueError("port must be an integer 1-65535")
    return BridgeAddress(entry, scheme.lower(), parts.hostname, port)
