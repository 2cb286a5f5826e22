"""Message payload codec: Python values as CBOR, handles as attachments, raw bytes as-is.

Rules (also in ``docs/usage.md``):

* A value of type ``bytes``, ``bytearray`` or ``memoryview`` is sent unchanged
  (no CBOR, no copy for ``bytes``) and the message carries the header
  ``content-type: application/octet-stream``. That keeps bulk data as cheap as
  raw QUIC and lets non-Python peers send plain bytes.
* Any other value is CBOR (cbor2) and carries no content-type header: each
  side announces ``content-type: application/cbor`` in its connection headers,
  which makes CBOR the default for messages without one.
* A side may announce another default instead (``connect(headers={"content-type":
  "application/octet-stream"})``): then its raw messages go header-free and its
  CBOR messages carry ``content-type: application/cbor``. Bytes-heavy
  applications save ~40 bytes per message that way. The receiver always
  reads a message without the header with the *sender's* announced default.
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

from collections.abc import Callable, Sequence
from typing import Any

import cbor2

from aqueduct.proto.errors import AqueductError
from aqueduct.runtime.headers import Headers, get_header

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
        raw = value if isinstance(value, bytes) else bytes(value)
        return raw, () if default_content_type == OCTET_STREAM else RAW_HEADERS

    def default(encoder: cbor2.CBOREncoder, obj: object) -> None:
        encoder.encode(cbor2.CBORTag(ATTACHMENT_TAG, attach(obj)))

    try:
        return cbor2.dumps(value, default=default), () if default_content_type == CBOR else CBOR_HEADERS
    except cbor2.CBOREncodeError as exc:
        # cbor2 wraps our TypeError; give the user the plain reason.
        cause = exc.__cause__ or exc
        raise TypeError(f"cannot encode message value: {cause}") from exc


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

    try:
        return cbor2.loads(payload, tag_hook=tag_hook)
    except PayloadError:
        raise
    except cbor2.CBORDecodeError as exc:
        if isinstance(exc.__cause__, PayloadError):
            raise exc.__cause__ from None
        raise PayloadError(f"MESSAGE payload: not valid CBOR ({exc})") from exc
