"""The bridge's TLS certificate: the one it was given, or one it made once in its log directory.

The QUIC listener and the Flight server present the same certificate.
Without ``certfile``/``keyfile`` the bridge generates a CA and a server
certificate under ``<log>/tls`` on first start (names: ``localhost``,
``127.0.0.1``, the QUIC listen host, and the Flight host connectors and
executors dial), and reuses them on every start after; producers verify
the bridge with that CA (:attr:`BridgeCertificate.cafile`).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from aqueduct.bridge.app.config import BridgeConfig
from aqueduct.runtime.certs import cert_paths, generate_certs

TLS_DIR = "tls"  # where generated certificates go inside the log directory


@dataclass(frozen=True)
class BridgeCertificate:
    """The files a TLS listener of the bridge presents."""

    certfile: Path
    keyfile: Path
    cafile: Path | None  # the CA connectors verify with, when the bridge generated the certificate


def bridge_certificate(c: BridgeConfig) -> BridgeCertificate:
    """The configured certificate, else the generated one (made now if the log directory has none)."""
    if c.certfile is not None and c.keyfile is not None:
        return BridgeCertificate(c.certfile, c.keyfile, None)
    paths = cert_paths(c.log_dir / TLS_DIR)
    if not paths.server_cert.exists():
        host = c.quic[0] if c.quic else "127.0.0.1"
        names = [dialled(c.flight_listen[0])] if c.serves_log else []
        hosts = dict.fromkeys(["localhost", "127.0.0.1", host, *names])
        generate_certs(c.log_dir / TLS_DIR, hosts=list(hosts))
    return BridgeCertificate(paths.server_cert, paths.server_key, paths.ca)


def dialled(host: str) -> str:
    """The name clients dial for a listen host: this machine's name for a wildcard address."""
    return socket.getfqdn() if host in ("", "0.0.0.0", "::") else host
