"""Checks a bridge makes before it creates anything or starts Spark: one line for each mistake.

Spark takes seconds to start and the log directory is created on open, so
a busy port, a certificate that does not match its key or a log another
bridge holds would otherwise be found late: after a fresh log directory
(and Spark's own files) had been left behind, as a traceback from deep
inside a listener, or never (a bridge whose producers all fail their
handshake). Each check here only looks, reads a file, or binds a socket
and closes it again; the first problem is raised as a
:class:`PreflightError` whose text is the one line to show the user.

``aqueduct-bridge serve`` and :class:`~aqueduct.bridge.app.spark_bridge.SparkBridge`
run the same checks on the same :class:`~aqueduct.bridge.app.config.BridgeConfig`,
so they refuse the same things with the same words; only the options'
names differ (``--client-ca`` on the command line, ``client_cafile=`` in
Python), which a :data:`Spelling` supplies: :func:`cli_option`, :func:`keyword`.

A port checked free may still be taken before the bridge binds it (another
process could be quicker); the bridge's own bind then fails as before.
This check is for the common case: a bridge, or anything else, already
listening there.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
from collections.abc import Callable
from pathlib import Path

from aqueduct.bridge.app.config import BridgeConfig
from aqueduct.bridge.storage.writer_lock import writer_lock_holder

#: ``hdfs:/...``, ``s3a://...``, ``file:/...``: a Hadoop filesystem URI, which Spark opens, not this process
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:")

#: How a :class:`BridgeConfig` field is named to the user who set it.
Spelling = Callable[[str], str]

#: ``serve``'s options whose name is not the field's, dashed
_CLI_NAMES = {"log_dir": "--log", "certfile": "--cert", "keyfile": "--key", "client_cafile": "--client-ca"}


def cli_option(field: str) -> str:
    """``client_cafile`` -> ``--client-ca``: the option of ``aqueduct-bridge serve`` setting ``field``."""
    return _CLI_NAMES.get(field, "--" + field.replace("_", "-"))


def keyword(field: str) -> str:
    """``client_cafile`` -> ``client_cafile=``: the keyword of ``SparkBridge(...)`` setting ``field``."""
    if field == "tcp_tls":  # the one switch: say what to pass
        return "tcp_tls=True"
    return "log=" if field == "log_dir" else f"{field}="


class PreflightError(ValueError):
    """What is wrong with the configuration, as one line for the user."""


# ---------------------------------------------------------------- the bridge's options


def check_options(c: BridgeConfig, spell: Spelling) -> None:
    """The options together: a listener, a whole certificate, mutual TLS only where every listener has TLS."""
    if c.quic is None and c.tcp is None and c.wallaroo_tcp is None:
        raise PreflightError(f"give {spell('quic')}, {spell('tcp')} and/or {spell('wallaroo_tcp')} HOST:PORT")
    if (c.certfile is None) != (c.keyfile is None):
        raise PreflightError(f"{spell('certfile')} and {spell('keyfile')} go together")
    if c.tcp_tls and c.tcp is None:
        raise PreflightError(f"{spell('tcp_tls')} needs {spell('tcp')} HOST:PORT")
    if c.client_cafile is not None:
        _check_mutual_tls(c, spell)
    from aqueduct.bridge.ingest.producer_auth import ProducerAuth, ProducerAuthError

    try:  # read now: a bad file is one line here, before anything is created
        ProducerAuth.from_options(c.token_key, c.acl, c.token_revoked, spell=spell)
    except ProducerAuthError as exc:
        raise PreflightError(str(exc)) from None
    if c.metrics is not None and importlib.util.find_spec("prometheus_client") is None:
        raise PreflightError(f"{spell('metrics')} needs prometheus_client: pip install 'aqueduct-quic[metrics]'")
    if c.quic is not None:
        from aqueduct.runtime.endpoints import check_backend

        try:
            check_backend(c.quic_backend, serve_on=c.quic[0])
        except ValueError as exc:
            raise PreflightError(f"{spell('quic_backend').rstrip('=')}: {exc}") from None


def _check_mutual_tls(c: BridgeConfig, spell: Spelling) -> None:
    """``client_cafile`` needs a TLS listener, and no plaintext one beside it (that would admit anyone)."""
    ca = spell("client_cafile")
    if c.quic is None and not c.tcp_tls:
        raise PreflightError(
            f"{ca} needs {spell('quic')} or {spell('tcp')} with {spell('tcp_tls')}: mutual TLS needs a TLS listener"
        )
    plaintext = [spell(f) for f, on in (("tcp", c.tcp is not None and not c.tcp_tls),
                                        ("wallaroo_tcp", c.wallaroo_tcp is not None)) if on]  # fmt: skip
    if plaintext:
        one = len(plaintext) == 1
        add_tls = f"add {spell('tcp_tls')}, or " if c.tcp is not None else ""
        raise PreflightError(
            f"{ca} admits only connectors with a certificate, but {' and '.join(plaintext)} "
            f"{'has' if one else 'have'} no TLS and would admit anyone: {add_tls}run {'it' if one else 'them'} "
            "on another bridge"
        )
    if c.quic is not None and c.quic_backend == "picoquic":
        raise PreflightError(f"{ca}: the picoquic backend cannot verify client certificates")


def check_files(c: BridgeConfig, spell: Spelling) -> None:
    """The log directory can be made and nobody holds it; the certificate files load and belong together."""
    check_new_directory(c.log_dir, spell("log_dir"))
    holder = writer_lock_holder(c.log_dir)
    if holder is not None:
        raise PreflightError(
            f"{spell('log_dir')} {c.log_dir}: held {holder}, its one writer; stop that one first, "
            "or give another log directory"
        )
    for field in ("certfile", "keyfile", "client_cafile"):
        path = getattr(c, field)
        if path is not None:
            check_readable_file(path, spell(field))
    if c.certfile is not None and c.keyfile is not None:
        check_certificate(c.certfile, c.keyfile, spell("certfile"), spell("keyfile"))
    if c.client_cafile is not None:
        _certificates(c.client_cafile, spell("client_cafile"))


def check_ports(c: BridgeConfig, spell: Spelling) -> None:
    """Every address the bridge will listen on is free: the listeners', ``/metrics``' and Flight's."""
    for field, udp in (("quic", True), ("tcp", False), ("wallaroo_tcp", False), ("metrics", False), ("flight", False)):
        address = getattr(c, field)
        if address is not None:
            check_port_free(spell(field), *address, udp=udp)


# ---------------------------------------------------------------- single checks


def check_new_directory(path: Path, option: str) -> None:
    """``path`` is a directory, or can be created as one (its nearest existing parent is a writable directory).

    A URI (``hdfs:///events``) is Spark's to open, on whatever filesystem it
    names: it is not checked here.
    """
    if _URI.match(str(path)):
        return
    if path.exists():
        if not path.is_dir():
            raise PreflightError(f"{option} {path}: exists and is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise PreflightError(f"{option} {path}: directory is not writable")
        return
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise PreflightError(f"{option} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PreflightError(f"{option} {path}: cannot create it, {parent} is not writable")


def check_readable_file(path: Path, option: str) -> None:
    """``path`` is a file this process can read."""
    if not path.is_file():
        raise PreflightError(f"{option} {path}: no such file")
    if not os.access(path, os.R_OK):
        raise PreflightError(f"{option} {path}: not readable")


def check_certificate(certfile: Path, keyfile: Path, cert_option: str, key_option: str) -> None:
    """``certfile`` holds PEM certificates (leaf first), ``keyfile`` the leaf's private key, unencrypted.

    Loaded as the listeners will load them: a garbage file or a key of
    another certificate would otherwise start a bridge whose producers all
    fail their handshake with no reason given.
    """
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        PublicFormat,
        load_pem_private_key,
    )

    leaf = _certificates(certfile, cert_option)[0]
    try:
        key = load_pem_private_key(keyfile.read_bytes(), password=None)
    except TypeError:  # cryptography's word for "encrypted, and no password given"
        raise PreflightError(f"{key_option} {keyfile}: the key is encrypted; the bridge needs it unencrypted") from None
    except ValueError:
        raise PreflightError(f"{key_option} {keyfile}: no PEM private key in it") from None
    spki = Encoding.DER, PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != leaf.public_key().public_bytes(*spki):
        raise PreflightError(
            f"{key_option} {keyfile} does not match {cert_option} {certfile}: the certificate is for another key"
        )


def _certificates(path: Path, option: str) -> list:
    """The PEM certificates in ``path`` (at least one)."""
    from cryptography.x509 import load_pem_x509_certificates

    try:
        return load_pem_x509_certificates(path.read_bytes())
    except ValueError:
        raise PreflightError(f"{option} {path}: no PEM certificate in it") from None


def check_port_free(option: str, host: str, port: int, udp: bool) -> None:
    """Bind ``host``:``port`` (UDP for QUIC, else TCP) and let go of it again; port 0 is always free.

    TCP binds with ``SO_REUSEADDR``, as asyncio's listener does, so a port
    whose last connections linger in TIME_WAIT does not count as busy.
    """
    kind = socket.SOCK_DGRAM if udp else socket.SOCK_STREAM
    try:
        infos = socket.getaddrinfo(host, port, type=kind, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise PreflightError(f"{option} {host}:{port}: cannot resolve {host!r}: {exc.strerror}") from None
    if port == 0:
        return
    family, _, _, _, address = infos[0]
    with socket.socket(family, kind) as probe:
        if not udp:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            what = "UDP" if udp else "TCP"
            raise PreflightError(f"{option} {host}:{port}: cannot listen there ({what}): {exc.strerror}") from None


#: seconds a master's address gets to accept a TCP connection before it counts as unreachable
MASTER_CONNECT_TIMEOUT = 5.0


def master_addresses(master: str) -> list[tuple[str, int]]:
    """Where a ``spark://`` (standalone, several for HA) or ``k8s://`` master listens; none for the others.

    ``local[...]`` needs no network, and YARN's resource manager comes from
    the Hadoop configuration, not the URL: those are left to Spark.
    """
    if master.startswith("spark://"):
        hosts = master.removeprefix("spark://").split(",")
        default = 7077
    elif master.startswith("k8s://"):
        rest = master.removeprefix("k8s://")
        hosts = [re.sub(r"^https?://", "", rest).split("/")[0]]
        default = 80 if rest.startswith("http://") else 443
    else:
        return []
    addresses = []
    for hostport in hosts:
        host, sep, port = hostport.rpartition(":")
        addresses.append((host.strip("[]"), int(port)) if sep and port.isdigit() else (hostport, default))
    return addresses


def check_master_reachable(master: str, option: str, timeout: float = MASTER_CONNECT_TIMEOUT) -> None:
    """A ``spark://``/``k8s://`` master accepts TCP connections (one of an HA list is enough).

    Spark itself would retry an unreachable master for minutes, a Java
    trace each time, after the log directory was created.
    """
    addresses = master_addresses(master)
    problems = []
    for host, port in addresses:
        try:
            socket.create_connection((host, port), timeout).close()
            return
        except TimeoutError:
            problems.append(f"{host}:{port}: no answer within {timeout:g} s")
        except OSError as exc:
            problems.append(f"{host}:{port}: {exc.strerror or exc}")
    if problems:
        raise PreflightError(f"{option} {master}: cannot reach the master ({'; '.join(problems)})")
