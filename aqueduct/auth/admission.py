"""Which identity a HELLO's credential establishes, on a bridge that checks tokens or certificates.

The bridge's admission policy in one place, given what the session
brings: HELLO's cookie field (a token travels there, told from a cookie by
its ``aqtN.`` prefix) and the subject of the client certificate TLS
verified, if any.

- With neither a token key nor an ACL (:attr:`Admission.required` false),
  the shared cookie admits, as before: the caller compares it and the
  session is :data:`~aqueduct.auth.identity.ANONYMOUS`; this class is not
  asked.
- Otherwise the cookie alone admits no one. A token is verified (with the
  ring of public keys and the revocations in force); without a token, a
  client certificate's subject is looked up in the ACL; a ``subject`` line
  of the revocation file shuts out certificates too.

The ACL and revocations are callables returning the version in force
(:meth:`aqueduct.auth.watched.WatchedFile.current` fits), so a changed
file applies from the next HELLO without this class reading it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aqueduct.auth.acl import Acl
from aqueduct.auth.identity import Identity
from aqueduct.auth.keys import KeyRing
from aqueduct.auth.permissions import Denied
from aqueduct.auth.refusals import Refusal, TokenRefused
from aqueduct.auth.revocation import NO_REVOCATIONS, Revocations
from aqueduct.auth.tokens import CLOCK_SKEW, looks_like_token, verify_token
from aqueduct.auth.verified import VerifiedTokens

__all__ = ["Admission"]


def _no_revocations() -> Revocations:
    return NO_REVOCATIONS


@dataclass(frozen=True)
class Admission:
    """A bridge's token keys, ACL and revocations; :meth:`admit` turns a credential into an identity."""

    keys: KeyRing | None = None  #: public keys tokens are verified with (None: no tokens taken)
    acl: Callable[[], Acl] | None = (
        None  #: the ACL in force, for certificate identities (None: none admitted)
    )
    revoked: Callable[[], Revocations] = _no_revocations
    skew: float = CLOCK_SKEW
    #: tokens verified before, whose signature check a reconnect skips (None: check every time)
    verified: VerifiedTokens | None = None

    @property
    def required(self) -> bool:
        """Does every producer need a token or an ACL-listed certificate (the cookie no longer admits)?"""
        return self.keys is not None or self.acl is not None

    def admit(
        self, secret: bytes, certificate_subject: str | None, now: float
    ) -> Identity | Denied:
        """The identity of a session whose HELLO carried ``secret`` over TLS with ``certificate_subject``."""
        if looks_like_token(secret):
            if self.keys is None:
                return Denied(
                    Refusal.UNKNOWN_KEY, "this bridge takes no tokens (it holds no token key)"
                )
            try:
                claims = verify_token(secret, self.keys, now, self.revoked(), self.skew, self.verified)
                return claims.identity()
            except TokenRefused as exc:
                return Denied(exc.reason, exc.detail)
        if certificate_subject is not None and self.acl is not None:
            why = self.revoked().revokes(None, certificate_subject)
            if why is not None:
                return Denied(
                    Refusal.REVOKED, f"certificate subject {certificate_subject!r}: {why}"
                )
            return self.acl().identity_for(certificate_subject)
        wanted = ["a token"] if self.keys is not None else []
        if self.acl is not None:
            wanted.append("a client certificate in its ACL")
        return Denied(
            Refusal.CREDENTIAL_REQUIRED,
            f"this bridge admits producers by {' or '.join(wanted)}, not by the cookie",
        )
