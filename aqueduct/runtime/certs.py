"""Make a throw-away certificate authority plus server and client certificates.

Aqueduct always runs over TLS 1.3, so even a loopback test or a laptop demo
needs a certificate the client can verify. This module creates a small local
CA and signs a server certificate (for the given host names / IP addresses)
and a client certificate (for mutual TLS) with it. The CA's certificate is
written twice, named by role: ``ca.pem`` for whoever verifies the server,
``client-ca.pem`` for the server that verifies clients (``--client-ca``), so
the mutual TLS example in docs/deployment.md runs on these files as written
and a production setup swaps in a CA dedicated to producers under the same
name. The CA's private key is not written to disk: to rotate, generate a fresh set (see ``certs/README.md``
for production use with a real CA).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_HOSTS = ("localhost", "127.0.0.1")
CLIENT_NAME = "aqueduct-client"


@dataclass(frozen=True)
class CertPaths:
    """Where :func:`generate_certs` wrote each file."""

    ca: Path
    client_ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def as_dict(self) -> dict[str, str]:
        """File names keyed by role, for ``aqueduct certs --json``."""
        return {
            "ca": str(self.ca),
            "client_ca": str(self.client_ca),
            "server_cert": str(self.server_cert),
            "server_key": str(self.server_key),
            "client_cert": str(self.client_cert),
            "client_key": str(self.client_key),
        }


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "aqueduct local"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(hosts: Iterable[str]) -> x509.SubjectAlternativeName:
    """IP literals become IPAddress entries (TLS checks them that way), the rest DNSName."""
    entries: list[x509.GeneralName] = []
    for host in hosts:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            entries.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(entries)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, days: int
) -> x509.CertificateBuilder:
    # Backdate a little so peers with a slightly slow clock accept it at once.
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    common_name: str,
    hosts: Iterable[str],
    usage: x509.ObjectIdentifier,
    days: int,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(_name(common_name), ca_name, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_san(hosts), critical=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    # Private keys are created 0600 from the start, never world-readable for a moment.
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def cert_paths(directory: str | os.PathLike[str]) -> CertPaths:
    """The file names :func:`generate_certs` uses inside ``directory``."""
    d = Path(directory)
    return CertPaths(
        ca=d / "ca.pem",
        client_ca=d / "client-ca.pem",
        server_cert=d / "server.pem",
        server_key=d / "server.key",
        client_cert=d / "client.pem",
        client_key=d / "client.key",
    )


def generate_certs(
    directory: str | os.PathLike[str],
    hosts: Iterable[str] = DEFAULT_HOSTS,
    days: int = 365,
    overwrite: bool = False,
) -> CertPaths:
    """Create ``ca.pem``, ``client-ca.pem``, ``server.pem/.key`` and ``client.pem/.key`` in ``directory``.

    ``hosts`` are the names and IP addresses clients will dial (they go in the
    server certificate's subjectAltName). Refuses to replace existing files
    unless ``overwrite`` is set, so a real deployment's keys are never
    clobbered by accident.
    """
    hosts = list(hosts)
    if not hosts:
        raise ValueError("certs: at least one host name or IP address is needed")
    if days <= 0:
        raise ValueError(f"certs: --days must be positive, got {days}")
    paths = cert_paths(directory)
    Path(directory).mkdir(parents=True, exist_ok=True)
    existing = [str(p) for p in paths.as_dict().values() if Path(p).exists()]
    if existing and not overwrite:
        raise FileExistsError(f"certs: refusing to overwrite {', '.join(existing)}")

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("aqueduct local CA")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server_cert, server_key = _leaf(
        ca_key, ca_name, hosts[0], hosts, ExtendedKeyUsageOID.SERVER_AUTH, days
    )
    client_cert, client_key = _leaf(
        ca_key, ca_name, CLIENT_NAME, [CLIENT_NAME], ExtendedKeyUsageOID.CLIENT_AUTH, days
    )
    _write_cert(paths.ca, ca_cert)
    _write_cert(paths.client_ca, ca_cert)  # the issuer of client.pem, for the server's --client-ca
    _write_cert(paths.server_cert, server_cert)
    _write_key(paths.server_key, server_key)
    _write_cert(paths.client_cert, client_cert)
    _write_key(paths.client_key, client_key)
    return paths
