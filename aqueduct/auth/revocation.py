"""The revocation file (``--token-revoked FILE``): token ids and subjects a bridge refuses.

Format (see :mod:`aqueduct.auth.textfile` for quoting and comments)::

    # a leaked laptop's token, by its id (`aqueduct token inspect` shows it as jti)
    token 3f9c2a1b0d4e5f60
    # every token issued to a subject, past and future, until the line is removed
    subject orders-host-17
    subject "CN=billing-1,O=Acme"

A ``subject`` line applies to any identity with that subject, so it also
shuts out a client certificate (mutual TLS has no revocation of its own
here). Tokens expire by themselves: a revoked token's line may be removed
once its expiry has passed.
"""

from __future__ import annotations

from dataclasses import dataclass

from aqueduct.auth.textfile import AuthFileError, rules

__all__ = ["NO_REVOCATIONS", "Revocations", "parse_revocations"]


@dataclass(frozen=True, slots=True)
class Revocations:
    """Revoked token ids and subjects."""

    token_ids: frozenset[str] = frozenset()
    subjects: frozenset[str] = frozenset()

    def revokes(self, token_id: str | None, subject: str) -> str | None:
        """Why a credential is revoked (``token id revoked``/``subject revoked``), or None if it is not."""
        if token_id is not None and token_id in self.token_ids:
            return "token id revoked"
        if subject in self.subjects:
            return "subject revoked"
        return None


NO_REVOCATIONS = Revocations()


def parse_revocations(text: str, source: str = "<revocations>") -> Revocations:
    """The revocations in ``text``; AuthFileError names the first bad line of ``source``."""
    found: dict[str, set[str]] = {"token": set(), "subject": set()}
    for line, words in rules(text, source):
        if len(words) != 2 or words[0] not in found:
            raise AuthFileError(source, line, "expected `token ID` or `subject NAME` (quote a name with spaces)")
        found[words[0]].add(words[1])
    return Revocations(frozenset(found["token"]), frozenset(found["subject"]))
