"""Who a producer session is, and the two questions the bridge asks of it: at HELLO and at NOTIFY.

Every admitted session has an :class:`Identity`: the subject of a signed
producer token, of a client certificate (mapped through the ACL file), or
``anonymous`` under the shared cookie, which may do everything, as before
identities existed (for development). The bridge keeps one per session,
asks :meth:`Identity.check_hello` once and :meth:`Identity.check_notify`
for each stream, and refuses with the :class:`~aqueduct.auth.permissions.Denied`
it gets (``str()`` is the ERROR text).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from cryptography import x509

from aqueduct.auth.permissions import ANYTHING, Denied, Permissions

__all__ = ["ANONYMOUS", "Identity", "Method", "certificate_subject"]


class Method(StrEnum):
    """How an identity was established (a log field and a metrics label)."""

    TOKEN = "token"
    CERTIFICATE = "certificate"
    ANONYMOUS = "anonymous"


@dataclass(frozen=True, slots=True)
class Identity:
    """A producer's subject, how it was established and what it may write.

    ``token_id`` and ``expires_at`` (seconds since the epoch) are set for
    token identities, so a log line can name the token to revoke.
    """

    subject: str
    method: Method
    permissions: Permissions
    token_id: str | None = None
    expires_at: int | None = None

    def check_hello(self, program: str, instance: str) -> Denied | None:
        """None if this identity may claim ``program/instance``, else why not."""
        return self.permissions.check_program(program, instance)

    def check_notify(self, stream_id: int, stream_name: str) -> Denied | None:
        """None if this identity may open stream ``stream_id`` named ``stream_name``, else why not."""
        return self.permissions.check_stream(stream_id, stream_name)

    def __str__(self) -> str:
        """``token:orders`` / ``certificate:CN=billing-1`` / ``anonymous``: a log field."""
        return self.method.value if self.method is Method.ANONYMOUS else f"{self.method.value}:{self.subject}"


#: the identity of every session admitted by the shared cookie
ANONYMOUS = Identity("anonymous", Method.ANONYMOUS, ANYTHING)


def certificate_subject(certificate: x509.Certificate) -> str:
    """The subject an ACL file matches for a client certificate: its RFC 4514 string.

    For example ``CN=billing-1,O=Acme`` (most specific part first); one
    function, so the ACL's patterns and the bridge's log spell it alike.
    """
    return certificate.subject.rfc4514_string()
