"""Why a producer was refused: one reason per cause, the same word in the log, the metrics and the ERROR.

A refusal has to be told apart by an operator (a token that *expired* wants
a new token, one with a *bad signature* wants an investigation), so each
cause is its own :class:`Refusal`, whose value is a metrics label
(``aqueduct_refusals_total{reason="expired"}``, in the style of the
bridge's existing ``bad_cookie`` and ``stream_owner`` kinds) and the first
word of the ERROR text the producer receives.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Refusal", "TokenRefused"]


class Refusal(StrEnum):
    """Every reason a credential or a request under it is refused."""

    # the token itself
    MALFORMED = "malformed"  #: not a token: bad framing, base64, JSON or claims
    UNKNOWN_VERSION = "unknown_version"  #: a token format this bridge does not read (``aqt2.``...)
    UNKNOWN_KEY = "unknown_key"  #: signed by a key id the bridge does not hold
    BAD_SIGNATURE = "bad_signature"  #: the signature does not verify under the named key
    EXPIRED = "expired"  #: past its expiry (beyond the clock-skew allowance)
    NOT_YET_VALID = "not_yet_valid"  #: issued in the future (beyond the clock-skew allowance)
    REVOKED = "revoked"  #: its token id or its subject is in the revocation file
    # the session's credential
    CREDENTIAL_REQUIRED = "credential_required"  #: no token nor certificate where the cookie admits no one
    NO_ACL_ENTRY = "no_acl_entry"  #: a certificate subject no line of the ACL file matches
    PROGRAM_NOT_ALLOWED = "program_not_allowed"  #: HELLO's program/instance is outside the identity's
    STREAM_NOT_ALLOWED = "stream_not_allowed"  #: NOTIFY's stream name is outside the identity's patterns
    STREAM_ID_NOT_ALLOWED = "stream_id_not_allowed"  #: NOTIFY's stream id is outside the identity's ranges


class TokenRefused(ValueError):
    """The one error the token decoder and verifier raise: ``reason`` plus a line for the operator.

    ``str()`` is ``"<reason>: <detail>"``: a log line and an ERROR text as it
    stands, never holding the token (a bearer secret) itself.
    """

    def __init__(self, reason: Refusal, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail
