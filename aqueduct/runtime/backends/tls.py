"""QUIC/TLS configuration for Aqueduct endpoints, including mutual TLS.

Both sides use TLS 1.3 (QUIC has nothing else), ALPN ``aqueduct`` and enable
QUIC datagrams (RFC 9221) by announcing ``max_datagram_frame_size``.

aioquic can request a client certificate but, as a server, never verifies
it (the switch is marked "for test purposes only"). Mutual TLS is a
requirement here, so :func:`require_client_certificate` hooks the server's
TLS context right after aioquic creates it: it sends a CertificateRequest,
aborts the handshake with ``certificate_required`` if the client sends none,
and verifies the client's chain against ``cafile`` (``bad_certificate`` on
failure) with a :class:`ClientCertificateAuthority` that parsed it once. The client then sees
the connection refused during the handshake, as with any TLS stack.

Certificates and keys are read once, not per connection: a server builds
its configuration once per listener, and :func:`client_configuration`
returns the same configuration to every ``connect`` with the same
settings and unchanged files (a fleet's reconnect storm in one process
would otherwise re-read and re-parse them thousands of times). Each
connection gets a shallow copy carrying its own session ticket
(:mod:`~aqueduct.runtime.backends.session_tickets`).
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from functools import lru_cache
from typing import Any

from aioquic import tls
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.tls import SessionTicket
from cryptography import x509
from OpenSSL import crypto

from aqueduct.runtime.backends import aioquic_internals
from aqueduct.runtime.backends.tls_failures import CLIENT_REFUSED, subject, validity_problem
from aqueduct.runtime.transport import ALPN, MAX_DATAGRAM_FRAME_SIZE

PathLike = str | os.PathLike[str]


def server_configuration(
    certfile: PathLike, keyfile: PathLike | None, idle_timeout: float = 60.0, **quic: Any
) -> QuicConfiguration:
    """The aioquic server configuration for an Aqueduct endpoint."""
    config = QuicConfiguration(
        is_client=False,
        alpn_protocols=[ALPN],
        max_datagram_frame_size=MAX_DATAGRAM_FRAME_SIZE,
        idle_timeout=idle_timeout,
        **quic,
    )
    config.load_cert_chain(certfile, keyfile)
    return config


def client_configuration(
    server_name: str,
    cafile: PathLike | None,
    verify: bool,
    certfile: PathLike | None,
    keyfile: PathLike | None,
    idle_timeout: float = 60.0,
    session_ticket: SessionTicket | None = None,
    token: bytes = b"",
) -> QuicConfiguration:
    """The aioquic client configuration; ``verify=False`` skips server verification (tests only).

    The files are read once per process for given settings and file
    versions (a file replaced on disk, a rotated certificate, is read
    again); ``session_ticket`` (a ticket to resume with) and ``token`` (the
    Initial's QUIC token: a busy server's turn) go in a copy.
    """
    files = tuple(None if f is None else os.fspath(f) for f in (cafile, certfile, keyfile))
    base = _client_configuration(
        server_name, verify, idle_timeout, files, tuple(_version(f) for f in files)
    )
    return dataclasses.replace(base, session_ticket=session_ticket, token=token)


def _version(path: str | None) -> tuple[int, int] | None:
    """What tells a file replaced on disk from the one read before: its (mtime, inode)."""
    if path is None:
        return None
    st = os.stat(path)
    return st.st_mtime_ns, st.st_ino


@lru_cache(maxsize=64)
def _client_configuration(
    server_name: str,
    verify: bool,
    idle_timeout: float,
    files: tuple[str | None, str | None, str | None],
    versions: tuple[tuple[int, int] | None, ...],  # part of the cache key only
) -> QuicConfiguration:
    cafile, certfile, keyfile = files
    config = QuicConfiguration(
        is_client=True,
        alpn_protocols=[ALPN],
        max_datagram_frame_size=MAX_DATAGRAM_FRAME_SIZE,
        server_name=server_name,
        idle_timeout=idle_timeout,
        verify_mode=ssl.CERT_REQUIRED if verify else ssl.CERT_NONE,
    )
    if cafile is not None:
        # the CA's bytes, not its path: aioquic would re-read the file on every handshake
        with open(cafile, "rb") as f:
            config.load_verify_locations(cadata=f.read())
    if certfile is not None:
        config.load_cert_chain(certfile, keyfile)
    return config


class ClientCertificateAuthority:
    """A server's CA for client certificates, parsed once (aioquic's ``verify_certificate`` re-reads it per call).

    Checks what aioquic's check does for a client (validity dates, then the
    chain up to the CA) with one certificate store for every connection.
    """

    def __init__(self, cafile: PathLike) -> None:
        self._store = crypto.X509Store()
        self._store.load_locations(os.fspath(cafile))

    def __call__(self, certificate: x509.Certificate, chain: list[x509.Certificate]) -> None:
        """Raise the TLS alert refusing ``certificate``, its reason phrase naming it and why (the client reads it too)."""
        refused = f"{CLIENT_REFUSED}'s certificate ({subject(certificate)}): it"
        if (why := validity_problem(certificate)) is not None:
            raise tls.AlertCertificateExpired(f"{refused} {why}")
        context = crypto.X509StoreContext(
            self._store,
            crypto.X509.from_cryptography(certificate),
            [crypto.X509.from_cryptography(c) for c in chain],
        )
        try:
            context.verify_certificate()
        except crypto.X509StoreContextError as exc:
            raise tls.AlertBadCertificate(f"{refused} is not signed by the client CA ({exc.args[0]})") from exc


def require_client_certificate(quic: QuicConnection, authority: ClientCertificateAuthority) -> None:
    """Make the server side of ``quic`` demand a client certificate ``authority`` accepts.

    Must be called before the first datagram reaches ``quic`` (aioquic builds
    its TLS context on the first Initial packet, in ``_initialize``).
    """
    aioquic_internals.after_tls_initialized(
        quic, lambda: aioquic_internals.verify_client_certificates(quic.tls, authority)
    )
