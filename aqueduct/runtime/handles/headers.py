"""Header helpers and the header middleware hook.

On the wire headers are a multimap of ASCII keys to byte values, kept in
order (``Headers = tuple[tuple[str, bytes], ...]``). Users may pass a dict or
pairs with ``str`` or ``bytes`` values; :func:`normalize_headers` turns those
into the wire form once, at the API edge, so the hot path never re-checks.

Middleware are plain callables ``fn(ctx: HeaderContext) -> None`` given to
``serve(..., middleware=[...])`` / ``connect(...)``. They run for every message
sent or received on that connection and may edit ``ctx.headers`` in place
(e.g. add a trace id on the way out, check an auth token on the way in).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from aqueduct.proto.errors import LocalProtocolError

Headers = tuple[tuple[str, bytes], ...]
HeadersLike = Mapping[str, str | bytes] | Iterable[tuple[str, str | bytes]] | None


def normalize_headers(headers: HeadersLike) -> Headers:
    """Return ``headers`` in wire form; reject keys the protocol forbids."""
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: list[tuple[str, bytes]] = []
    for key, value in items:
        if not isinstance(key, str) or not key or not key.isascii():
            raise LocalProtocolError(f"header key {key!r}: keys must be non-empty ASCII strings")
        if isinstance(value, str):
            value = value.encode()
        elif not isinstance(value, bytes | bytearray | memoryview):
            raise LocalProtocolError(f"header {key!r}: value must be str or bytes, got {type(value).__name__}")
        out.append((key, bytes(value)))
    return tuple(out)


def get_header(headers: Headers, key: str) -> bytes | None:
    """The first value of ``key`` (keys compare case-insensitively, like HTTP), or None."""
    key = key.lower()
    for k, v in headers:
        if k.lower() == key:
            return v
    return None


@dataclass(slots=True)
class HeaderContext:
    """What a middleware sees: one message's headers, editable in place."""

    direction: Literal["outgoing", "incoming"]
    chanid: int
    headers: list[tuple[str, bytes]]
    peer_headers: Headers


Middleware = Callable[[HeaderContext], None]


def run_middleware(
    middleware: tuple[Middleware, ...],
    direction: Literal["outgoing", "incoming"],
    chanid: int,
    headers: Headers,
    peer_headers: Headers,
) -> Headers:
    """Pass ``headers`` through every middleware in order; return the result."""
    if not middleware:
        return headers
    ctx = HeaderContext(direction, chanid, list(headers), peer_headers)
    for fn in middleware:
        fn(ctx)
    return normalize_headers(ctx.headers)
