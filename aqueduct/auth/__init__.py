"""Who may write what: producer identities, signed tokens, permissions, the ACL and revocation files.

Sans-IO, like :mod:`aqueduct.wire`: the modules here parse and decide, and
are given the time (``now``) and the files' text; only
:mod:`aqueduct.auth.watched` reads files (re-reading them when they change).
It imports nothing of the rest of the package, so the bridge (admission),
the connector (sending a token) and the ``aqueduct token`` command may all
use it.

- :mod:`~aqueduct.auth.tokens`: ``aqt1.`` tokens, issued and verified (Ed25519);
- :mod:`~aqueduct.auth.verified`: tokens verified once, whose signature check a reconnect skips;
- :mod:`~aqueduct.auth.keys`: the key pair's PEM files, the ring of public keys by key id;
- :mod:`~aqueduct.auth.identity`, :mod:`~aqueduct.auth.permissions`: an identity and its HELLO/NOTIFY checks;
- :mod:`~aqueduct.auth.acl`, :mod:`~aqueduct.auth.revocation`: the operator's two files;
- :mod:`~aqueduct.auth.admission`: a HELLO's credential (token, certificate) to an identity;
- :mod:`~aqueduct.auth.refusals`: every reason a producer is refused.
"""

from aqueduct.auth.acl import Acl, AclEntry, parse_acl
from aqueduct.auth.admission import Admission
from aqueduct.auth.identity import ANONYMOUS, Identity, Method, certificate_subject
from aqueduct.auth.keys import KeyRing, key_id, load_private_key
from aqueduct.auth.permissions import (
    ANYTHING,
    Denied,
    IdRange,
    Permissions,
    parse_id_ranges,
    parse_patterns,
)
from aqueduct.auth.refusals import Refusal, TokenRefused
from aqueduct.auth.revocation import NO_REVOCATIONS, Revocations, parse_revocations
from aqueduct.auth.textfile import AuthFileError
from aqueduct.auth.tokens import (
    CLOCK_SKEW,
    TokenClaims,
    decode_token,
    issue_token,
    looks_like_token,
    verify_token,
)

__all__ = [
    "ANONYMOUS",
    "ANYTHING",
    "CLOCK_SKEW",
    "NO_REVOCATIONS",
    "Acl",
    "AclEntry",
    "Admission",
    "AuthFileError",
    "Denied",
    "IdRange",
    "Identity",
    "KeyRing",
    "Method",
    "Permissions",
    "Refusal",
    "Revocations",
    "TokenClaims",
    "TokenRefused",
    "certificate_subject",
    "decode_token",
    "issue_token",
    "key_id",
    "load_private_key",
    "looks_like_token",
    "parse_acl",
    "parse_id_ranges",
    "parse_patterns",
    "parse_revocations",
    "verify_token",
]
