"""Primitives of spec section 2: varint, varbytes, header data.

Two layers of readers:

* ``read_*`` are the fast internal readers used by the frame codecs. They
  raise ``IncompleteData`` when the buffer ends too early (an incremental
  decoder then waits for more) and ``WireError`` when the bytes are malformed.
* ``decode_*`` are the public one-shot decoders of the contract: truncation
  is an error for them, so ``IncompleteData`` never escapes.

Buffers may be ``bytes``, ``bytearray`` or ``memoryview``; indexing gives an
int in all three, and ``bytes(buf[a:b])`` copies at most once for bytes and
memoryviews, which is what the stream decoder hands in.
"""

from __future__ import annotations

from aqueduct.wire.errors import IncompleteData, WireError

Buffer = bytes | bytearray | memoryview
Headers = tuple[tuple[str, bytes], ...]

MAX_VARINT = (1 << 64) - 1
_MAX_8_BYTE = (1 << 56) - 1
_SMALL = tuple(bytes((i,)) for i in range(128))
_EMPTY_HEADERS = b"\x00"
# Memoised header data, both directions (see encode_headers / read_headers):
# bounded, and only successful results are kept, so behaviour is unchanged.
_CACHE_ENTRIES = 256
_CACHE_MAX_BYTES = 256  # larger header data is decoded every time
_ENCODED: dict[Headers, bytes] = {}
_DECODED: dict[bytes, Headers] = {}


def varint_len(n: int) -> int:
    """Length of the minimal encoding of ``n`` (1..9)."""
    if n < 0 or n > MAX_VARINT:
        raise WireError(f"varint: {n} is outside 0..2^64-1")
    if n > _MAX_8_BYTE:
        return 9
    return max(1, (n.bit_length() + 6) // 7)


def encode_varint(n: int) -> bytes:
    """Minimal encoding: 7 bits per byte, low first; a 9th byte carries bits 56..63 whole."""
    if 0 <= n < 128:
        return _SMALL[n]
    if 0 < n < 16384:  # lengths and message numbers: the next most common case
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    if 0 < n < 0x10000000:  # message numbers of a long-lived channel: 3 or 4 bytes
        if n < 0x200000:
            return bytes(((n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, n >> 14))
        return bytes(((n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, ((n >> 14) & 0x7F) | 0x80, n >> 21))
    if n < 0 or n > MAX_VARINT:
        raise WireError(f"varint: {n} is outside 0..2^64-1")
    out = bytearray()
    for _ in range(8):
        if n < 128:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)  # 9th byte: bits 56..63, all 8 of them
    return bytes(out)


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a varint at ``pos``; non-minimal encodings are accepted (spec section 2)."""
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        value = b & 0x7F
        shift = 7
        pos += 1
        while True:
            b = buf[pos]
            pos += 1
            if shift == 56:
                return value | (b << 56), pos
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value, pos
            shift += 7
    except IndexError:
        raise IncompleteData("varint ends mid-way") from None


def read_varbytes(buf: Buffer, pos: int, limit: int, what: str) -> tuple[bytes, int]:
    """Read a varbytes whose length may not exceed ``limit``; ``what`` names it in errors."""
    n, pos = read_varint(buf, pos)
    if n > limit:
        raise WireError(f"{what} length {n} exceeds the limit of {limit} bytes")
    end = pos + n
    if end > len(buf):
        raise IncompleteData(f"{what} length {n}, only {len(buf) - pos} bytes present", end)
    return bytes(buf[pos:end]), end


def encode_varbytes(b: bytes) -> bytes:
    """Varint length, then the bytes."""
    return encode_varint(len(b)) + b


def encode_headers(h: Headers) -> bytes:
    """Header data: a varbytes holding key, value, key, value... each as varbytes.

    Applications send the same few header tuples over and over (the payload
    codec adds one constant ``content-type`` per message), so encodings are
    memoised: a hit costs one dict lookup instead of an encode per message.
    """
    if not h:
        return _EMPTY_HEADERS
    try:
        cached = _ENCODED.get(h)
    except TypeError:  # an unhashable value (bytearray): encode, never cache
        return _encode_headers(h)
    if cached is None:
        cached = _encode_headers(h)
        if len(_ENCODED) < _CACHE_ENTRIES:
            _ENCODED[h] = cached
    return cached


def _encode_headers(h: Headers) -> bytes:
    parts = []
    for key, value in h:
        try:
            k = key.encode("ascii")
        except (UnicodeEncodeError, AttributeError):
            raise WireError(f"header key {key!r} must be non-empty ASCII") from None
        if not k:
            raise WireError("header key must be non-empty ASCII")
        parts.append(encode_varint(len(k)))
        parts.append(k)
        parts.append(encode_varint(len(value)))
        parts.append(value)
    inner = b"".join(parts)
    return encode_varint(len(inner)) + inner


def read_headers(buf: Buffer, pos: int, limit: int) -> tuple[Headers, int]:
    """Read header data at ``pos``; at most ``limit`` bytes of content."""
    n = buf[pos] if pos < len(buf) else 0x80  # (0x80: let read_varint report the truncation)
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_varint(buf, pos)
    if n == 0:
        return (), pos
    if n > limit:
        raise WireError(f"header data length {n} exceeds the limit of {limit} bytes")
    end = pos + n
    if end > len(buf):
        raise IncompleteData(f"header data length {n}, only {len(buf) - pos} bytes present", end)
    if n <= _CACHE_MAX_BYTES:
        raw = bytes(buf[pos:end])
        headers = _DECODED.get(raw)
        if headers is None:
            headers = _parse_headers(raw, 0, n)
            if len(_DECODED) < _CACHE_ENTRIES:
                _DECODED[raw] = headers
        return headers, end
    return _parse_headers(buf, pos, end), end


def _parse_headers(buf: Buffer, pos: int, end: int) -> Headers:
    """The key/value pairs filling exactly ``buf[pos:end]``."""
    items = []
    try:
        while pos < end:
            klen, pos = read_varint(buf, pos)
            kend = pos + klen
            if kend >= end:  # the key runs past the end, or no value follows it
                break
            key = bytes(buf[pos:kend])
            vlen, pos = read_varint(buf, kend)
            vend = pos + vlen
            if vend > end:
                break
            if not key or not key.isascii():
                raise WireError(f"header key {key!r} must be non-empty ASCII")
            items.append((key.decode("ascii"), bytes(buf[pos:vend])))
            pos = vend
        else:
            return tuple(items)
    except IncompleteData:
        pass
    raise WireError("header data must hold key/value pairs of varbytes")


def decode_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Public one-shot reader: (value, new pos); truncation is a ``WireError``."""
    try:
        return read_varint(buf, pos)
    except IncompleteData as e:
        raise WireError(f"varint: {e.rule}") from None


def decode_varbytes(buf: Buffer, pos: int = 0) -> tuple[bytes, int]:
    """Public one-shot reader: (bytes, new pos); truncation is a ``WireError``."""
    try:
        return read_varbytes(buf, pos, MAX_VARINT, "varbytes")
    except IncompleteData as e:
        raise WireError(e.rule) from None


def decode_headers(buf: Buffer, pos: int = 0) -> tuple[Headers, int]:
    """Public one-shot reader: (headers, new pos); truncation is a ``WireError``."""
    try:
        return read_headers(buf, pos, MAX_VARINT)
    except IncompleteData as e:
        raise WireError(e.rule) from None
