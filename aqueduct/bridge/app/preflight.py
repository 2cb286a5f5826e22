"""Checks ``aqueduct-bridge serve`` makes before it creates anything or starts Spark.

Spark takes seconds to start and the log directory is created on open, so
a busy port or a ``--log`` that names a file would otherwise be found late,
after a fresh log directory (and Spark's own files) had been left behind.
Each check here only looks, or binds a socket and closes it again; the
first problem is raised as a :class:`PreflightError` whose text is the
one line to show the user.

A port checked free may still be taken before the bridge binds it (another
process could be quicker); the bridge's own bind then fails as before.
This check is for the common case: a bridge, or anything else, already
listening there.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

#: ``hdfs:/...``, ``s3a://...``, ``file:/...``: a Hadoop filesystem URI, which Spark opens, not this process
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:")


class PreflightError(ValueError):
    """What is wrong with the configuration, as one line for the user."""


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
