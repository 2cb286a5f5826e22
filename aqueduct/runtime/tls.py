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

from aioquic import tls
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection

ALPN = "aqueduct"
# Largest DATAGRAM frame we accept; the payload that fits is further bounded by
# the path's packet size, which the driver reports to the core.
MAX_DATAGRAM_FRAME_SIZE = 65536

PathLike = str | os.PathLike[str]


class AlertCertificateRequired(tls.Alert):
    """TLS alert 116: the server requires a client certificate and got none."""

    description = tls.AlertDescription.certificate_required


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
    initialize = quic._initialize

    def initialize_with_client_auth(peer_cid: bytes) -> None:
        initialize(peer_cid)
        _hook_tls(quic.tls, cafile)

    quic._initialize = initialize_with_client_auth  # type: ignore[method-assign]


def _hook_tls(context: tls.Context, cafile: str) -> None:
    context._request_client_certificate = True
    handle_certificate = context._server_handle_certificate
    handle_verify = context._server_handle_certificate_verify

    def server_handle_certificate(input_buf: Any) -> None:
        handle_certificate(input_buf)
        if context._peer_certificate is None:
            raise AlertCertificateRequired("a client certificate is required (mutual TLS)")

    def server_handle_certificate_verify(input_buf: Any) -> None:
        handle_verify(input_buf)  # proves the client holds the certificate's key
        assert context._peer_certificate is not None
        tls.verify_certificate(
            certificate=context._peer_certificate,
            chain=context._peer_certificate_chain,
            cafile=cafile,
        )

    context._server_handle_certificate = server_handle_certificate  # type: ignore[method-assign]
    context._server_handle_certificate_verify = server_handle_certificate_verify  # type: ignore[method-assign]
