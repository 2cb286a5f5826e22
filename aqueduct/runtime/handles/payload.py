"""Message payload codec: Python values as CBOR, handles as attachments, raw bytes as-is.

Rules (also in ``docs/usage.md``):

* Each side announces ``content-type: application/cbor`` in its connection
  headers, which makes CBOR the type of every message without a
  content-type header. Values are CBOR (cbor2).
* A ``bytes``, ``bytearray`` or ``memoryview`` value is a CBOR byte string:
  its bytes unchanged behind a 1-9 byte CBOR head, and it arrives as
  ``bytes``. (Marking raw messages with a per-message ``content-type:
  application/octet-stream`` header instead would cost 39 bytes per
  message, more than a third of a 100-byte message.)
* A side may announce another default instead (``connect(headers={"content-type":
  "application/octet-stream"})``): then its raw values go as they are, with
  no CBOR head and no header, and its other values carry ``content-type:
  application/cbor``. This is for peers that speak plain bytes (the
  connector transport does it). The receiver always reads a message without
  the header with the *sender's* announced default.
* A :class:`~aqueduct.runtime.handles.Sender` or ``Receiver`` anywhere inside
  a CBOR value becomes an attachment of the message; in the CBOR it is
  replaced by tag 16721 ("AQ") whose content is the attachment's index.
* A message with another content type is delivered as raw bytes; the
  application reads the header to know what it got.

The codec does not know the handle classes: cbor2 calls our ``default`` hook
for every type it cannot encode, and the caller's ``attach`` callback decides
whether the object is a handle (returning its attachment index) or not
(raising ``TypeError``).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

import cbor2

from aqueduct.proto.errors import AqueductError
from aqueduct.runtime.handles.headers import Headers, get_header

CONTENT_TYPE = "content-type"
CBOR = b"application/cbor"
OCTET_STREAM = b"application/octet-stream"
ATTACHMENT_TAG = 16721  # 0x4151, "AQ"

RAW_HEADERS: Headers = ((CONTENT_TYPE, OCTET_STREAM),)
CBOR_HEADERS: Headers = ((CONTENT_TYPE, CBOR),)
CONNECTION_HEADERS: Headers = ((CONTENT_TYPE, CBOR),)


class PayloadError(AqueductError, ValueError):
    """A received payload cannot be decoded (bad CBOR or a bad attachment reference)."""


def is_raw(value: object) -> bool:
    """True if ``value`` travels as raw bytes rather than CBOR."""
    return isinstance(value, bytes | bytearray | memoryview)


def encode_value(
    value: object, attach: Callable[[object], int], default_content_type: bytes = CBOR
) -> tuple[bytes, Headers]:
    """Encode ``value``; return ``(payload, headers the codec needs)``.

    ``attach(obj)`` is called for each object cbor2 cannot encode natively; it
    returns the attachment index for a handle and raises ``TypeError`` for
    anything else. ``default_content_type`` is what this side announced in its
    connection headers: messages of that type need no per-message header.
    """
    if isinstance(value, bytes | bytearray | memoryview):
        return encode_bytes(value if isinstance(value, bytes) else bytes(value), default_content_type)

    def default(encoder: cbor2.CBOREncoder, obj: object) -> None:
        encoder.encode(cbor2.CBORTag(ATTACHMENT_TAG, attach(obj)))

    try:
        return cbor2.dumps(value, default=default), () if default_content_type == CBOR else CBOR_HEADERS
    except cbor2.CBOREncodeError as exc:
        # cbor2 wraps our TypeError; give the user the plain reason.
        cause = exc.__cause__ or exc
        raise TypeError(f"cannot encode message value: {cause}") from exc


def encode_bytes(raw: bytes, default_content_type: bytes = CBOR) -> tuple[bytes, Headers]:
    """Raw bytes as a payload: a CBOR byte string under the CBOR default, else bare.

    Bare raw bytes under another default carry ``RAW_HEADERS`` (the
    receiver must not decode them as that type); under octet-stream they
    need no header at all.
    """
    if default_content_type == CBOR:
        return _bstr_head(len(raw)) + raw, ()
    if default_content_type == OCTET_STREAM:
        return raw, ()
    return raw, RAW_HEADERS


def _bstr_head(n: int) -> bytes:
    """The CBOR head of a byte string of ``n`` bytes (major type 2, RFC 8949 section 3)."""
    if n < 24:
        return bytes((0x40 | n,))
    if n < 0x100:
        return bytes((0x58, n))
    if n < 0x10000:
        return b"\x59" + n.to_bytes(2, "big")
    if n < 0x100000000:
        return b"\x5a" + n.to_bytes(4, "big")
    return b"\x5b" + n.to_bytes(8, "big")


def _bstr_body(payload: bytes) -> bytes | None:
    """The bytes of a payload that is exactly one definite-length CBOR byte string, else None."""
    if not payload:
        return None
    head = payload[0]
    if 0x40 <= head < 0x58:
        start, n = 1, head - 0x40
    elif head == 0x58 and len(payload) > 1:
        start, n = 2, payload[1]
    elif head == 0x59:
        start, n = 3, int.from_bytes(payload[1:3], "big")
    elif head == 0x5A:
        start, n = 5, int.from_bytes(payload[1:5], "big")
    else:
        return None
    return payload[start:] if len(payload) - start == n else None


def plain_decoder(default_content_type: bytes) -> Callable[[bytes], Any] | None:
    """How to decode a message without headers or attachments; None: its payload is the value."""
    return _decode_plain_cbor if default_content_type == CBOR else None


def _decode_plain_cbor(payload: bytes) -> Any:
    # Raw bytes of 24-255 bytes (the head 0x58, n) inline: the bulk case of
    # small messages, without _decode_cbor's and _bstr_body's calls.
    if len(payload) > 1 and payload[0] == 0x58 and len(payload) == payload[1] + 2:
        return payload[2:]
    return _decode_cbor(payload, ())


def content_type(headers: Headers, default: bytes = CBOR) -> bytes:
    """The message's content type, falling back to the connection's default."""
    return get_header(headers, CONTENT_TYPE) or default


def decode_value(
    payload: bytes,
    headers: Headers,
    attachments: Sequence[Any],
    default_content_type: bytes = CBOR,
) -> Any:
    """Decode a received payload; tag 16721 resolves to ``attachments[index]``."""
    if content_type(headers, default_content_type) != CBOR:
        return payload
    return _decode_cbor(payload, attachments)


def _decode_cbor(payload: bytes, attachments: Sequence[Any]) -> Any:
    body = _bstr_body(payload)  # a raw-bytes value: no cbor2 call
    if body is not None:
        return body

    def tag_hook(tag: cbor2.CBORTag, immutable: bool) -> Any:  # cbor2 >= 6 signature
        if tag.tag != ATTACHMENT_TAG:
            return tag
        index = tag.value
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(attachments):
            raise PayloadError(
                f"MESSAGE payload: tag {ATTACHMENT_TAG} must hold an attachment index "
                f"below {len(attachments)}, got {index!r}"
            )
        return attachments[index]

    fp = io.BytesIO(payload)
    try:
        value = cbor2.CBORDecoder(fp, tag_hook=tag_hook).decode()
    except PayloadError:
        raise
    except cbor2.CBORDecodeError as exc:
        if isinstance(exc.__cause__, PayloadError):
            raise exc.__cause__ from None
        raise PayloadError(f"MESSAGE payload: not valid CBOR ({exc})") from exc
    extra = len(payload) - fp.tell()
    if extra:  # application/cbor is one data item (RFC 8949); cbor2 ignores what follows
        raise PayloadError(
            f"MESSAGE payload: not valid CBOR ({extra} byte{'s' if extra > 1 else ''} after the value)"
        )
    return value
