"""Signed producer tokens: issued offline with the operator's private key, checked with the public key alone.

A token is one printable line, ``aqt1.<payload>.<signature>``:

- ``aqt1`` names the format (a later one is refused as ``unknown_version``,
  never guessed at); a bridge tells a token from a cookie in HELLO's cookie
  field by this prefix (:func:`looks_like_token`);
- ``<payload>`` is base64url (no padding) of canonical JSON (sorted keys, no
  spaces) of the claims: ``sub`` subject, ``programs`` and ``streams``
  (glob patterns), ``ids`` (inclusive stream id ranges, absent: any id),
  ``iat`` issued-at and ``exp`` expiry (seconds since the epoch), ``jti``
  the token id (what a revocation file names), ``kid`` the signing key's id;
- ``<signature>`` is base64url of the Ed25519 signature of the ASCII bytes
  ``aqt1.<payload>``, so the version is signed too.

Why Ed25519 from ``cryptography`` rather than a JWT library: no new
dependency (``cryptography`` already makes our certificates); one algorithm
fixed by the version, so there is no ``alg`` header to confuse (JWT's
``none`` and HMAC-with-the-public-key attacks cannot happen); small,
deterministic signatures (a token with a few patterns is ~300 characters,
well inside HELLO's 64 KiB cookie field); and fast verification (see
``bench/token_cost.py``).

Verification order: framing, then the claims' shape, then the key id, then
the signature, then revocation, issued-at and expiry, each with its own
:class:`~aqueduct.auth.refusals.Refusal`; every failure of any kind is a
:class:`~aqueduct.auth.refusals.TokenRefused`, never another exception.
Times are passed in (``now``), never read here.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from aqueduct.auth.identity import Identity, Method
from aqueduct.auth.keys import KeyRing, key_id
from aqueduct.auth.permissions import IdRange, Permissions
from aqueduct.auth.refusals import Refusal, TokenRefused
from aqueduct.auth.revocation import NO_REVOCATIONS, Revocations
from aqueduct.auth.verified import VerifiedTokens

__all__ = [
    "CLOCK_SKEW",
    "MAX_TOKEN_LENGTH",
    "TOKEN_PREFIX",
    "TokenClaims",
    "decode_token",
    "issue_token",
    "looks_like_token",
    "verify_token",
]

TOKEN_PREFIX = "aqt1"
#: seconds a bridge's clock may be behind or ahead of the issuer's: a token is
#: accepted until ``exp + CLOCK_SKEW`` and from ``iat - CLOCK_SKEW``
CLOCK_SKEW = 60
#: longest token read: decoding stays cheap whatever a peer sends in HELLO
MAX_TOKEN_LENGTH = 8192

_VERSION = re.compile(r"aqt[0-9]+")
_B64 = re.compile(r"[A-Za-z0-9_-]+")
_CLAIM_KEYS = {"sub", "programs", "streams", "ids", "iat", "exp", "jti", "kid"}
_REQUIRED = _CLAIM_KEYS - {"ids"}
_SIGNATURE_BYTES = 64
_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """What a token says (trusted only once :func:`verify_token` returned it)."""

    subject: str
    programs: tuple[str, ...]
    streams: tuple[str, ...]
    stream_ids: tuple[IdRange, ...] | None
    issued_at: int
    expires_at: int
    token_id: str
    key_id: str

    def as_json(self) -> dict[str, Any]:
        """The payload's JSON object (also ``aqueduct token inspect``'s claims)."""
        doc: dict[str, Any] = {
            "sub": self.subject,
            "programs": list(self.programs),
            "streams": list(self.streams),
            "iat": self.issued_at,
            "exp": self.expires_at,
            "jti": self.token_id,
            "kid": self.key_id,
        }
        if self.stream_ids is not None:
            doc["ids"] = [[r.low, r.high] for r in self.stream_ids]
        return doc

    def permissions(self) -> Permissions:
        return Permissions(self.programs, self.streams, self.stream_ids, f"token {self.token_id} (subject {self.subject!r})")

    def identity(self) -> Identity:
        """The session's identity under this token."""
        return Identity(self.subject, Method.TOKEN, self.permissions(), self.token_id, self.expires_at)


def looks_like_token(secret: bytes | str) -> bool:
    """Is HELLO's cookie field a token (``aqtN.``...) rather than a shared cookie?"""
    head = (secret.encode("ascii", "replace") if isinstance(secret, str) else secret)[:12]
    return re.match(rb"aqt[0-9]+\.", head) is not None


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str, what: str) -> bytes:
    # The alphabet and a length base64 can have: what decoding would otherwise refuse (or skip).
    if _B64.fullmatch(text) is None or len(text) % 4 == 1:
        raise TokenRefused(Refusal.MALFORMED, f"the {what} is not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or not value.isprintable() or len(value) > 1024:
        raise TokenRefused(Refusal.MALFORMED, f"{what} must be a non-empty printable string")
    return value


def _patterns(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise TokenRefused(Refusal.MALFORMED, f"{what} must be a non-empty list of patterns")
    patterns = tuple(_name(p, what) for p in value)
    if any("," in p for p in patterns):
        raise TokenRefused(Refusal.MALFORMED, f"{what} hold a comma")
    return patterns


def _time(value: object, what: str) -> int:
    if type(value) is not int or not 0 <= value <= _U64_MAX:
        raise TokenRefused(Refusal.MALFORMED, f"{what} must be whole seconds since the epoch")
    return value


def _ranges(value: object) -> tuple[IdRange, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise TokenRefused(Refusal.MALFORMED, "ids must be a non-empty list of [low, high]")
    ranges = []
    for pair in value:
        if not (isinstance(pair, list) and len(pair) == 2 and all(type(v) is int for v in pair)):
            raise TokenRefused(Refusal.MALFORMED, "ids must be a non-empty list of [low, high]")
        try:
            ranges.append(IdRange(pair[0], pair[1]))
        except ValueError as exc:
            raise TokenRefused(Refusal.MALFORMED, str(exc)) from None
    return tuple(ranges)


def _claims(doc: object) -> TokenClaims:
    if not isinstance(doc, dict):
        raise TokenRefused(Refusal.MALFORMED, "the payload is not a JSON object")
    keys = set(doc)
    if keys - _CLAIM_KEYS or _REQUIRED - keys:
        wrong = sorted(keys - _CLAIM_KEYS) or sorted(_REQUIRED - keys)
        raise TokenRefused(Refusal.MALFORMED, f"the claims are not those of {TOKEN_PREFIX} ({', '.join(wrong)})")
    return TokenClaims(
        subject=_name(doc["sub"], "sub"),
        programs=_patterns(doc["programs"], "programs"),
        streams=_patterns(doc["streams"], "streams"),
        stream_ids=_ranges(doc.get("ids")),
        issued_at=_time(doc["iat"], "iat"),
        expires_at=_time(doc["exp"], "exp"),
        token_id=_name(doc["jti"], "jti"),
        key_id=_name(doc["kid"], "kid"),
    )


def _split(token: bytes | str) -> tuple[TokenClaims, bytes, bytes]:
    """The claims (unverified), the signed bytes and the signature; TokenRefused for anything else."""
    if isinstance(token, bytes):
        try:
            token = token.decode("ascii")
        except UnicodeDecodeError:
            raise TokenRefused(Refusal.MALFORMED, "a token is ASCII") from None
    if len(token) > MAX_TOKEN_LENGTH:
        raise TokenRefused(Refusal.MALFORMED, f"longer than {MAX_TOKEN_LENGTH} characters")
    parts = token.split(".")
    if _VERSION.fullmatch(parts[0]) is not None and parts[0] != TOKEN_PREFIX:
        raise TokenRefused(Refusal.UNKNOWN_VERSION, f"format {parts[0]!r}; this bridge reads {TOKEN_PREFIX}")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        raise TokenRefused(Refusal.MALFORMED, f"not {TOKEN_PREFIX}.<payload>.<signature>")
    payload = _b64decode(parts[1], "payload")
    signature = _b64decode(parts[2], "signature")
    if len(signature) != _SIGNATURE_BYTES:
        raise TokenRefused(Refusal.MALFORMED, f"the signature is {len(signature)} bytes, not {_SIGNATURE_BYTES}")
    try:
        doc = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise TokenRefused(Refusal.MALFORMED, "the payload is not JSON") from None
    return _claims(doc), f"{parts[0]}.{parts[1]}".encode("ascii"), signature


def decode_token(token: bytes | str) -> TokenClaims:
    """The claims a token holds, WITHOUT checking its signature (``aqueduct token inspect``)."""
    return _split(token)[0]


def verify_token(
    token: bytes | str,
    keys: KeyRing,
    now: float,
    revoked: Revocations = NO_REVOCATIONS,
    skew: float = CLOCK_SKEW,
    verified: VerifiedTokens | None = None,
) -> TokenClaims:
    """The claims of a token signed by one of ``keys``, not revoked, valid at ``now``; else TokenRefused.

    ``verified``: tokens whose signature verified before under ``keys``
    (:mod:`aqueduct.auth.verified`), whose check this one then skips; the
    rest is checked every time.
    """
    text = token.encode() if isinstance(token, str) else token
    claims = verified.get(text, keys) if verified is not None else None
    if not isinstance(claims, TokenClaims):
        claims = _verified_signature(token, keys)
        if verified is not None:
            verified.put(text, keys, claims)
    why = revoked.revokes(claims.token_id, claims.subject)
    if why is not None:
        raise TokenRefused(Refusal.REVOKED, f"token {claims.token_id} of {claims.subject!r}: {why}")
    if now + skew < claims.issued_at:
        raise TokenRefused(
            Refusal.NOT_YET_VALID, f"token {claims.token_id} is issued {claims.issued_at - now:.0f} s in the future"
        )
    if now - skew >= claims.expires_at:
        raise TokenRefused(
            Refusal.EXPIRED, f"token {claims.token_id} of {claims.subject!r} expired {now - claims.expires_at:.0f} s ago"
        )
    return claims


def _verified_signature(token: bytes | str, keys: KeyRing) -> TokenClaims:
    """The claims of a token whose signature verifies under the key it names; else TokenRefused."""
    claims, signed, signature = _split(token)
    public_key = keys.get(claims.key_id)
    if public_key is None:
        raise TokenRefused(Refusal.UNKNOWN_KEY, f"signed by key {claims.key_id}, which this bridge does not hold")
    try:
        public_key.verify(signature, signed)
    except InvalidSignature:
        raise TokenRefused(Refusal.BAD_SIGNATURE, f"the signature does not verify under key {claims.key_id}") from None
    return claims


def _signed(payload: bytes, private_key: Ed25519PrivateKey) -> str:
    head = f"{TOKEN_PREFIX}.{_b64encode(payload)}"
    return f"{head}.{_b64encode(private_key.sign(head.encode('ascii')))}"


def issue_token(
    private_key: Ed25519PrivateKey,
    *,
    subject: str,
    streams: tuple[str, ...],
    programs: tuple[str, ...] | None = None,
    stream_ids: tuple[IdRange, ...] | None = None,
    now: int,
    lifetime: int,
    token_id: str | None = None,
) -> str:
    """A token for ``subject``, valid from ``now`` for ``lifetime`` seconds.

    ``programs`` defaults to ``subject/*``: the subject's own program, any
    instance, so a token cannot claim another program's connector name
    unless it is issued to. ``token_id`` defaults to 16 random hex digits.
    ValueError if the claims would not verify (an empty or comma-holding
    pattern, a non-positive lifetime, a token too long).
    """
    if lifetime <= 0:
        raise ValueError(f"lifetime must be positive, got {lifetime}")
    claims = TokenClaims(
        subject=subject,
        programs=programs if programs is not None else (f"{subject}/*",),
        streams=streams,
        stream_ids=stream_ids,
        issued_at=now,
        expires_at=now + lifetime,
        token_id=token_id if token_id is not None else secrets.token_hex(8),
        key_id=key_id(private_key.public_key()),
    )
    payload = json.dumps(claims.as_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    token = _signed(payload, private_key)
    try:
        _split(token)
    except TokenRefused as exc:
        raise ValueError(f"these claims would be refused: {exc.detail}") from None
    return token
