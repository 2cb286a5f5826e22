"""The bridge's producer credentials: its token key, ACL and revocation files, kept current.

The sans-IO :class:`~aqueduct.auth.admission.Admission` decides; this
module gives it the operator's files and the clock. Each file is a
:class:`~aqueduct.auth.watched.WatchedFile`: re-read (one ``stat`` per
HELLO) when it changes, so a new public key (rotation), an ACL line or a
revocation applies from the next HELLO without a restart, and a bad edit
keeps the last good version in force. :meth:`ProducerAuth.check` is the
worker sessions' :data:`~aqueduct.connector.credentials.CredentialCheck`;
a token it verified once skips the signature check when its producer
reconnects (:mod:`aqueduct.auth.verified`; expiry and revocation are
checked every time).

A file that cannot be used at start raises :class:`ProducerAuthError`
(one line naming the file and the option that gave it), before the bridge
creates anything. The option is named as the user spelled it: ``serve``'s
``--token-key`` by default, ``SparkBridge``'s ``token_key`` when
:mod:`aqueduct.bridge.app.preflight` passes that surface's spelling.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from aqueduct.auth.acl import parse_acl
from aqueduct.auth.admission import Admission
from aqueduct.auth.identity import Identity, Method
from aqueduct.auth.keys import KeyRing
from aqueduct.auth.permissions import Denied
from aqueduct.auth.refusals import Refusal
from aqueduct.auth.revocation import parse_revocations
from aqueduct.auth.textfile import AuthFileError
from aqueduct.auth.verified import VerifiedTokens
from aqueduct.auth.watched import WatchedFile

__all__ = ["ProducerAuth", "ProducerAuthError"]

T = TypeVar("T")


def _serve_option(field: str) -> str:
    """``token_key`` -> ``--token-key``: the option of ``aqueduct-bridge serve`` (the names agree for these three)."""
    return "--" + field.replace("_", "-")


class ProducerAuthError(ValueError):
    """A credential file the bridge cannot start with: ``str()`` is one line naming it."""


def _parse_keys(text: str, source: str) -> KeyRing:
    try:
        return KeyRing.from_pem(text.encode())
    except ValueError as exc:
        raise AuthFileError(source, 1, str(exc)) from None


def _watch(option: str, path: Path, parse: Callable[[str, str], T]) -> WatchedFile[T]:
    """``path`` read and parsed now, kept current; a problem is one line starting ``option: ``."""
    option = option.rstrip("=")  # ``token_key: …``, not ``token_key=: …``
    try:
        return WatchedFile(path, parse)
    except AuthFileError as exc:
        raise ProducerAuthError(f"{option}: {exc}") from None
    except UnicodeDecodeError:
        raise ProducerAuthError(f"{option}: {path}: not UTF-8 text") from None
    except OSError as exc:
        raise ProducerAuthError(f"{option}: cannot read {path}: {exc.strerror}") from None


class ProducerAuth:
    """Who the bridge admits: tokens under its public key(s), certificates its ACL lists, minus revocations."""

    def __init__(
        self,
        token_key: Path | None = None,
        acl: Path | None = None,
        token_revoked: Path | None = None,
        *,
        spell: Callable[[str], str] = _serve_option,
    ) -> None:
        if token_key is None and acl is None:
            raise ProducerAuthError(
                f"{spell('token_revoked')} needs {spell('token_key')} or {spell('acl')} "
                "(it revokes tokens or certificates)"
            )
        self._keys = None if token_key is None else _watch(spell("token_key"), token_key, _parse_keys)
        self._acl = None if acl is None else _watch(spell("acl"), acl, parse_acl)
        self._revoked = (
            None if token_revoked is None else _watch(spell("token_revoked"), token_revoked, parse_revocations)
        )
        self._admission = Admission(
            keys=None if self._keys is None else self._keys.current(),
            acl=None if self._acl is None else self._acl.current,
            **({} if self._revoked is None else {"revoked": self._revoked.current}),
            verified=VerifiedTokens(),
        )

    @classmethod
    def from_options(
        cls,
        token_key: Path | None,
        acl: Path | None,
        token_revoked: Path | None,
        *,
        spell: Callable[[str], str] = _serve_option,
    ) -> ProducerAuth | None:
        """The bridge's credentials, or None when no option asks for any (the shared cookie admits)."""
        if token_key is None and acl is None and token_revoked is None:
            return None
        return cls(token_key, acl, token_revoked, spell=spell)

    def check(self, secret: bytes, certificate_subject: str | None) -> Identity | Denied:
        """The identity HELLO's ``secret`` (and verified certificate) establishes now, or why not."""
        if self._keys is not None:
            keys = self._keys.current()
            if keys is not self._admission.keys:  # the key file changed: rotation
                self._admission = replace(self._admission, keys=keys)
        return self._admission.admit(secret, certificate_subject, time.time())

    def sessions_check(self, now: float | None = None) -> Callable[[Identity], Denied | None]:
        """Why a session admitted earlier under an identity no longer would be (revoked, expired), or None.

        For the live sessions (:meth:`~aqueduct.bridge.ingest.service.Ingest.end_sessions`):
        a HELLO is checked once, and a producer may stay connected for days.
        The revocation file is read once for all of them.
        """
        now = time.time() if now is None else now
        revocations, skew = self._admission.revoked(), self._admission.skew

        def check(identity: Identity) -> Denied | None:
            if identity.method is Method.ANONYMOUS:
                return None
            revoked = revocations.revokes(identity.token_id, identity.subject)
            if revoked is not None:
                return Denied(Refusal.REVOKED, f"{identity}: {revoked} while connected")
            if identity.expires_at is not None and now - skew >= identity.expires_at:
                return Denied(
                    Refusal.EXPIRED, f"token {identity.token_id} of {identity.subject!r} expired while connected"
                )
            return None

        return check

    def problems(self) -> list[str]:
        """What is wrong with the files on disk now (their last good versions stay in force)."""
        watched = (self._keys, self._acl, self._revoked)
        return [w.problem for w in watched if w is not None and w.problem is not None]
