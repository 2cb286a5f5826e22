"""Who a worker admits at HELLO: the shared cookie, or the application's credential check.

Both worker wires (the connector's and Wallaroo's v3) carry a credential in
HELLO's cookie field and answer it the same way, so the decision is here
once. Without a check, the cookie is compared in constant time, as the
spec says, and an admitted session is
:data:`~aqueduct.auth.identity.ANONYMOUS` (it may write anything). With
one (the bridge started with a token key or an ACL), the check turns the
field, a token told apart by its ``aqtN.`` prefix, and the client
certificate's subject into an :class:`~aqueduct.auth.identity.Identity`
or a refusal, and the identity must allow the ``program/instance`` HELLO
names. Sans-IO: the check is given; the bridge binds its clock and files.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from aqueduct.auth.identity import ANONYMOUS, Identity
from aqueduct.auth.permissions import Denied
from aqueduct.auth.refusals import Refusal

__all__ = ["CredentialCheck", "admit_hello"]

CredentialCheck = Callable[[bytes, str | None], Identity | Denied]
"""``(HELLO's cookie field, the verified client certificate's subject or None) -> identity or refusal``."""


def admit_hello(
    cookie: bytes,
    check: CredentialCheck | None,
    secret: bytes,
    certificate_subject: str | None,
    program: str,
    instance: str,
    certificate_required: bool = False,
) -> Identity | str:
    """The identity HELLO establishes, or the ERROR reason refusing it.

    ``cookie`` is the shared cookie (empty: none expected, and none
    accepted), used only without ``check``. A refusal's reason starts with
    its :class:`~aqueduct.auth.refusals.Refusal` value (``expired: ...``)
    or ``bad cookie``: the bridge counts refusals by that first word.
    ``certificate_required``: the listener admits only producers whose
    client certificate TLS verified (mutual TLS), whatever else they bring.
    """
    if certificate_required and certificate_subject is None:
        return f"{Refusal.CREDENTIAL_REQUIRED.value}: this listener admits only producers presenting a client certificate"
    if check is None:
        if not cookie and secret:
            return "bad cookie: this worker expects no cookie"
        if not hmac.compare_digest(secret, cookie):
            return "bad cookie"
        return ANONYMOUS
    admitted = check(secret, certificate_subject)
    if isinstance(admitted, Denied):
        return str(admitted)
    denied = admitted.check_hello(program, instance)
    return admitted if denied is None else str(denied)
