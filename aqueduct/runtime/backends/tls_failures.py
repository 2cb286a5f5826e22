"""What a failed TLS handshake says: whose certificate failed, which one, and why, in one line.

A QUIC connection that a TLS alert ended carries only the alert's code
(``CRYPTO_ERROR`` + the alert, RFC 9000 section 20.1) and maybe a reason
phrase, the same whichever side sent it. A client cannot tell from that
alone whether it refused the server's certificate or the server refused
its own, and picoquic does not even report its own alert (the connection
just ends, code 0). So each side words its failure from what it knows:

* a client checks the server's certificate again, here, with the settings
  it connected with (:func:`server_certificate_problem`): if it fails, the
  server's certificate is at fault, named by its subject, with the reason
  in words (expired on a date, made for other names, not signed by a CA in
  the ``cafile``); if it passes, the server sent the alert, refusing the
  client's certificate or its lack of one (:func:`client_failure`);
* a server names a client certificate it refused in the alert it sends
  (:class:`~aqueduct.runtime.backends.tls.ClientCertificateAuthority`), and
  any other certificate alert is the client refusing the server's
  certificate (:func:`server_failure`); :class:`HandshakeFailures` counts
  and logs each with the client's address, on either backend.

The error a client raises, :class:`CertificateRefused`, is a
``ConnectionLost`` with a code in the ``CRYPTO_ERROR`` range, so whoever
treats a TLS alert as final (a producer gives up at once) does so on both
backends.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
from collections import Counter
from typing import Any, Literal

from aioquic import tls
from cryptography import x509

from aqueduct.proto.errors import ConnectionLost
from aqueduct.runtime.transport import NO_REASON

logger = logging.getLogger("aqueduct.runtime.backends.quic_server")  # where operators already look

CRYPTO_ERROR = 0x100
"""QUIC's error code for a TLS alert is this plus the alert (RFC 9000 section 20.1)."""
CERTIFICATE_ALERTS = frozenset(
    {
        tls.AlertDescription.bad_certificate,
        tls.AlertDescription.unsupported_certificate,
        tls.AlertDescription.certificate_revoked,
        tls.AlertDescription.certificate_expired,
        tls.AlertDescription.certificate_unknown,
        tls.AlertDescription.unknown_ca,
        tls.AlertDescription.certificate_required,
    }
)
CLIENT_REFUSED = "refused the client"
"""How a server's own alert about a client certificate begins (its reason phrase, sent to the client too)."""


def is_tls_alert(code: int | None) -> bool:
    """Whether a QUIC close code is a TLS alert (QUIC's CRYPTO_ERROR range)."""
    return code is not None and CRYPTO_ERROR <= code <= CRYPTO_ERROR + 0xFF


def alert_name(code: int) -> str:
    """``bad_certificate (alert 42)`` for QUIC code 0x12a."""
    alert = code - CRYPTO_ERROR
    try:
        return f"{tls.AlertDescription(alert).name} (alert {alert})"
    except ValueError:
        return f"alert {alert}"


def subject(certificate: x509.Certificate) -> str:
    """A certificate's subject as an operator reads it: ``CN=localhost,O=aqueduct local``."""
    return certificate.subject.rfc4514_string()


def file_subject(certfile: str | os.PathLike[str]) -> str:
    """The subject of the (first) certificate in a PEM file."""
    with open(certfile, "rb") as f:
        return subject(x509.load_pem_x509_certificate(f.read()))


def _when(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _names(certificate: x509.Certificate) -> str:
    """The host names and addresses a certificate is for (its subjectAltName), for a message."""
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "no subjectAltName"
    names = [str(n) for n in san.get_values_for_type(x509.DNSName)]
    names += [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    return ", ".join(names) or "no host names"


def validity_problem(
    certificate: x509.Certificate, now: datetime.datetime | None = None
) -> str | None:
    """``expired on ...`` / ``is not valid before ...``, or None while the certificate is valid."""
    now = now or datetime.datetime.now(datetime.UTC)
    if now > certificate.not_valid_after_utc:
        return f"expired on {_when(certificate.not_valid_after_utc)}"
    if now < certificate.not_valid_before_utc:
        return f"is not valid before {_when(certificate.not_valid_before_utc)}"
    return None


def server_certificate_problem(
    certificate: x509.Certificate,
    chain: list[x509.Certificate],
    server_name: str | None,
    cafile: str | os.PathLike[str] | None,
) -> tuple[int, str] | None:
    """Why a client refuses this server certificate, as (QUIC close code, words), or None if it verifies.

    aioquic's own check decides (the one an aioquic client ran; picoquic's
    checks the same dates, name and chain with OpenSSL); the words are
    ours, naming the certificate, the date, the names or the ``cafile``.
    """
    try:
        tls.verify_certificate(
            certificate, chain, server_name, cafile=None if cafile is None else os.fspath(cafile)
        )
    except tls.Alert as exc:
        why = validity_problem(certificate)
        if why is None and server_name is not None and str(exc).startswith("hostname "):
            why = f"is for {_names(certificate)}, not {_host(server_name)}"
        if why is None:
            trusted = (
                f"a CA in cafile {os.fspath(cafile)}"
                if cafile is not None
                else "a CA this system trusts"
            )
            why = f"is not signed by {trusted} ({exc})"
        return CRYPTO_ERROR + int(
            exc.description
        ), f"the server's certificate ({subject(certificate)}) {why}"
    return None


def _host(server_name: str) -> str:
    try:
        ipaddress.ip_address(server_name)
    except ValueError:
        return f"host {server_name!r}"
    return f"address {server_name}"


class CertificateRefused(ConnectionLost):
    """The TLS handshake failed over a certificate: ``whose`` (``server`` or ``client``) and why, in the message.

    Its ``code`` is the TLS alert's QUIC close code, so it is final for
    whoever treats an alert as final; ``str()`` is one line:
    ``connection closed (error code 298): the server's certificate
    (CN=localhost,O=aqueduct local) expired on 2026-01-01 00:00:00 UTC``.
    """

    def __init__(self, code: int, words: str, whose: Literal["server", "client"]) -> None:
        super().__init__(f"connection closed (error code {code}): {words}", code)
        self.whose = whose
        self.words = words


def client_failure(
    lost: ConnectionLost,
    server_certificate: tuple[x509.Certificate, list[x509.Certificate]] | None,
    *,
    server_name: str,
    cafile: str | os.PathLike[str] | None,
    verify: bool,
    certfile: str | os.PathLike[str] | None,
) -> ConnectionLost:
    """What a client's failed handshake raises: ``lost`` itself, or a :class:`CertificateRefused` saying whose.

    ``lost`` must end in a TLS alert (the caller knows; picoquic's own
    alerts come as code 0 and are then found here by checking
    ``server_certificate``, which the caller fetched). With the server's
    certificate at hand and verification on, a certificate that fails the
    check is the server's fault; otherwise the alert came from the server,
    about the client's certificate.
    """
    if verify and server_certificate is not None:
        problem = server_certificate_problem(*server_certificate, server_name, cafile)
        if problem is not None:
            return CertificateRefused(problem[0], problem[1], "server")
    code = lost.code
    if not is_tls_alert(code):
        return lost
    assert code is not None
    said = _said(lost)
    if said.startswith(CLIENT_REFUSED):  # an Aqueduct server's own words
        return CertificateRefused(code, f"the server {said}", "client")
    if code - CRYPTO_ERROR == tls.AlertDescription.certificate_required:
        words = (
            "the server requires a client certificate (mutual TLS) and this client presented none"
        )
        return CertificateRefused(code, words, "client")
    if certfile is not None and code - CRYPTO_ERROR in CERTIFICATE_ALERTS:
        words = f"the server refused this client's certificate ({file_subject(certfile)}): {said or alert_name(code)}"
        return CertificateRefused(code, words, "client")
    return lost


def _said(lost: ConnectionLost) -> str:
    """The reason phrase that came with a close, "" if none."""
    said = lost.reason.partition("): ")[2]
    return "" if said == NO_REASON else said


def server_failure(error: BaseException) -> str:
    """A server's words for a handshake that failed, from what ended it.

    Its own refusal of a client certificate already says so (the reason
    phrase it sent); any other certificate alert came from the client,
    which refused the server's certificate (picoquic's clients send no
    reason phrase, aioquic's send their check's words).
    """
    code = getattr(error, "code", None)
    if not is_tls_alert(code):
        return str(error)
    assert isinstance(error, ConnectionLost) and code is not None
    said = _said(error)
    if said.startswith(CLIENT_REFUSED):
        return said
    if code - CRYPTO_ERROR in CERTIFICATE_ALERTS:
        return f"the client refused this server's certificate: {alert_name(code)}" + (
            f", {said}" if said else ""
        )
    return f"TLS {alert_name(code)}" + (f": {said}" if said else "")


class HandshakeFailures:
    """A server's failed handshakes: counted by kind and logged, each with the client's address.

    ``tls``: a TLS alert (a certificate refused, either way); ``other``:
    the rest, mostly clients that went away mid-handshake (a crowd of them
    in a reconnect storm), logged at INFO where a TLS alert, a
    misconfigured peer and an operator's business, is a WARNING.
    """

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def failed(self, address: tuple[Any, ...] | None, error: BaseException) -> None:
        kind = "tls" if is_tls_alert(getattr(error, "code", None)) else "other"
        self.counts[kind] += 1
        remote = f"{address[0]}:{address[1]}" if address else "an unknown address"
        words = server_failure(error)
        logger.log(
            logging.WARNING if kind == "tls" else logging.INFO,
            "QUIC handshake from %s failed: %s", remote, words,
            extra={"fields": {"event": "handshake_failed", "kind": kind, "remote": f"quic {remote}", "reason": words}},
        )  # fmt: skip
