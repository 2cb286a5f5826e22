"""The ACL file (``--acl FILE``): what each client certificate's subject may claim and write.

In the spirit of Kafka's ACLs (a principal, the resources it may write),
for certificate identities; token identities carry their permissions in the
token. One ``allow`` line per rule (see :mod:`aqueduct.auth.textfile` for
quoting and comments)::

    # allow SUBJECT-PATTERN programs=PATTERNS streams=PATTERNS [ids=RANGES]
    allow "CN=billing-*,O=Acme"  programs=billing/*  streams=billing-*,audit  ids=1000-1999
    allow "CN=aqueduct-client,O=aqueduct local"  programs=*  streams=*

- ``SUBJECT-PATTERN`` is a glob matched against the certificate's subject as
  an RFC 4514 string (:func:`~aqueduct.auth.identity.certificate_subject`:
  ``CN=billing-1,O=Acme``, most specific part first);
- ``programs=`` globs over HELLO's ``program/instance``, ``streams=`` globs
  over stream names (both required, comma-separated), ``ids=`` inclusive
  stream id ranges (optional; without it any id);
- the **first** line whose pattern matches decides (put specific lines
  first); a subject no line matches is refused (``no_acl_entry``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from aqueduct.auth.identity import Identity, Method
from aqueduct.auth.permissions import Denied, Permissions, parse_id_ranges, parse_patterns
from aqueduct.auth.refusals import Refusal
from aqueduct.auth.textfile import AuthFileError, rules

__all__ = ["Acl", "AclEntry", "parse_acl"]

_KEYS = ("programs", "streams", "ids")


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ``allow`` line: the subjects it matches and what it grants them."""

    subject: str  #: glob over a certificate's RFC 4514 subject
    permissions: Permissions  #: ``source`` is ``FILE:LINE``


@dataclass(frozen=True, slots=True)
class Acl:
    """The lines of an ACL file, in order."""

    entries: tuple[AclEntry, ...]
    source: str

    def identity_for(self, subject: str) -> Identity | Denied:
        """The identity of a client certificate with ``subject``, or ``no_acl_entry``."""
        for entry in self.entries:
            if fnmatchcase(subject, entry.subject):
                return Identity(subject, Method.CERTIFICATE, entry.permissions)
        return Denied(Refusal.NO_ACL_ENTRY, f"certificate subject {subject!r} matches no line of {self.source}")


def _entry(words: list[str], source: str, line: int) -> AclEntry:
    if len(words) < 2 or words[0] != "allow":
        raise AuthFileError(source, line, "expected `allow SUBJECT-PATTERN programs=... streams=... [ids=...]`")
    values: dict[str, str] = {}
    for word in words[2:]:
        key, eq, value = word.partition("=")
        if not eq or key not in _KEYS:
            raise AuthFileError(source, line, f"unknown setting {word!r} (expected {'=, '.join(_KEYS)}=)")
        if key in values:
            raise AuthFileError(source, line, f"{key}= given twice")
        values[key] = value
    missing = [k for k in ("programs", "streams") if k not in values]
    if missing:
        raise AuthFileError(source, line, f"missing {' and '.join(k + '=' for k in missing)}")
    try:
        permissions = Permissions(
            programs=parse_patterns(values["programs"]),
            streams=parse_patterns(values["streams"]),
            stream_ids=parse_id_ranges(values["ids"]) if "ids" in values else None,
            source=f"{source}:{line}",
        )
    except ValueError as exc:
        raise AuthFileError(source, line, str(exc)) from None
    return AclEntry(words[1], permissions)


def parse_acl(text: str, source: str = "<acl>") -> Acl:
    """The ACL in ``text``; AuthFileError names the first bad line of ``source``. An empty file admits no one."""
    return Acl(tuple(_entry(words, source, line) for line, words in rules(text, source)), source)
