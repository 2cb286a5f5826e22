"""The bridge's log served over Arrow Flight, and the source options that read the log.

A bridge serves its log (:mod:`aqueduct.bridge.network.flight_server`)
when told to (``flight``), when it is ingest-only, or when its Spark
master is not local: executors on other hosts then read through it
(``option("bridge")``), not from the disk. Whichever it is, the queries
the bridge starts or hands out read the log through
:func:`source_options`, so that choice is made in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aqueduct.bridge.app.config import BridgeConfig
from aqueduct.bridge.app.tls import TLS_DIR, BridgeCertificate, dialled
from aqueduct.bridge.network.flight_server import (
    TOKEN_FILE,
    CommitHandler,
    LogFlightServer,
    load_or_create_token,
    start_flight_server,
)


@dataclass(frozen=True)
class ServedLog:
    """A running Flight server of the log, and what a reader needs to reach it."""

    server: LogFlightServer
    address: str  # HOST:PORT executors dial (the listen host, or this host's name for a wildcard)
    token_file: Path


def serve_log(c: BridgeConfig, certificate: BridgeCertificate, on_commit: CommitHandler | None = None) -> ServedLog:
    """Serve the log over Flight with the bridge's certificate and its token file; readers' commits go to ``on_commit``."""
    token_file = c.log_dir / TLS_DIR / TOKEN_FILE
    token = load_or_create_token(token_file)
    host, port = c.flight_listen
    server = start_flight_server(
        c.log_dir, host, port, token=token, certfile=certificate.certfile, keyfile=certificate.keyfile,
        on_commit=on_commit,
    )  # fmt: skip
    return ServedLog(server, f"{dialled(host)}:{server.port}", token_file)


def source_options(log_dir: Path, served: ServedLog | None, cafile: Path | None) -> dict[str, str]:
    """The ``aqueduct`` source options reading this bridge's log: its directory, or over Flight.

    Only file paths travel in the options; the source reads the token and
    CA from them on the driver (which runs here).
    """
    if served is None:
        return {"log": str(log_dir)}
    options = {"bridge": served.address, "bridgeTokenFile": str(served.token_file)}
    if cafile is not None:
        options["bridgeCA"] = str(cafile)
    return options
