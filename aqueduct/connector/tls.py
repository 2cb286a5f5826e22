"""TLS for the connector wire over TCP: both ends' contexts, and the client certificate's subject.

QUIC brings its own TLS; TCP takes it from :mod:`ssl` (URL scheme
``tcps://`` on the producer, ``serve --tcp-tls`` on the bridge). The
server presents the same certificate as its QUIC listener and, given a
CA, asks for a client certificate and verifies it; the subject of a
verified one is part of the session's credential
(:func:`aqueduct.auth.identity.certificate_subject` spells it, as an ACL
file matches it).
"""

from __future__ import annotations

import ssl
from os import PathLike

from cryptography import x509

from aqueduct.auth.identity import certificate_subject

__all__ = ["certificate_required", "client_context", "peer_certificate_subject", "server_context"]

_Path = str | PathLike[str]


def server_context(certfile: _Path, keyfile: _Path, client_cafile: _Path | None = None) -> ssl.SSLContext:
    """The listener's context: TLS 1.2 or later; with ``client_cafile``, client certificates it signed.

    The certificate is asked for and verified, but its absence does not fail
    the handshake (``CERT_OPTIONAL``): the session refuses the HELLO
    instead (:func:`certificate_required`), with an ERROR the producer
    reads and gives up on. A failed server-side handshake under asyncio
    reaches the client as a closed connection, which it would retry for
    ever. A certificate the CA did not sign still fails the handshake.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    if client_cafile is not None:
        context.load_verify_locations(client_cafile)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def certificate_required(context: ssl.SSLContext | None) -> bool:
    """Does a listener with this context admit only producers presenting a verified client certificate?"""
    return context is not None and context.verify_mode != ssl.CERT_NONE


def client_context(
    cafile: _Path | None = None, certfile: _Path | None = None, keyfile: _Path | None = None
) -> ssl.SSLContext:
    """The producer's context: the bridge verified with ``cafile`` (else the system's CAs), its name checked."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if certfile is not None:
        context.load_cert_chain(certfile, keyfile)
    return context


def peer_certificate_subject(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str | None:
    """The subject of the certificate the peer presented and TLS verified, or None (no TLS, no certificate)."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return None if der is None else certificate_subject(x509.load_der_x509_certificate(der))
