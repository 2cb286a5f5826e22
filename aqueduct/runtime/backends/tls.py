"""QUIC/TLS configuration for Aqueduct endpoints, including mutual TLS.

Both sides use TLS 1.3 (QUIC has nothing else), ALPN ``aqueduct`` and enable
QUIC datagrams (RFC 9221) by announcing ``max_datagram_frame_size``.

aioquic can request a client certificate but, as a server, never verifies
it (the switch is marked "for test purposes only"). Mutual TLS is a
requirement here, so :func:`require_client_certificate` hooks the server's
TLS context right after aioquic creates it: it sends a CertificateRequest,
aborts the handshake with ``certificate_required`` if the client sends none,
and verifies the client's chain against ``cafile`` with aioquic's own
``verify_certificate`` (``bad_certificate`` on failure). The client then sees
the connection refused during the handshake, as with any TLS stack.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection

from aqueduct.runtime.backends import aioquic_internals
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
    **quic: Any,
) -> QuicConfiguration:
    """The aioquic client configuration; ``verify=False`` skips server verification (tests only)."""
    config = QuicConfiguration(
        is_client=True,
        alpn_protocols=[ALPN],
        max_datagram_frame_size=MAX_DATAGRAM_FRAME_SIZE,
        server_name=server_name,
        idle_timeout=idle_timeout,
        verify_mode=ssl.CERT_REQUIRED if verify else ssl.CERT_NONE,
        **quic,
    )
    if cafile is not None:
        config.load_verify_locations(cafile=os.fspath(cafile))
    if certfile is not None:
        config.load_cert_chain(certfile, keyfile)
    return config


def require_client_certificate(quic: QuicConnection, cafile: PathLike) -> None:
    """Make the server side of ``quic`` demand and verify a client certificate signed by ``cafile``.

    Must be called before the first datagram reaches ``quic`` (aioquic builds
    its TLS context on the first Initial packet, in ``_initialize``).
    """
    cafile = os.fspath(cafile)
    aioquic_internals.after_tls_initialized(quic, lambda: aioquic_internals.verify_client_certificates(quic.tls, cafile))
