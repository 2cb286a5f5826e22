"""Where a test's source reads a log: its directory, or a bridge's Flight server for it.

The source's tests run both ways (``option("log")`` and ``option("bridge")``)
to show that every option behaves the same on both: :class:`FlightLogs`
serves each log directory a test names over real TLS on loopback, with a
real token, and hands back the options that read it remotely.
"""

from __future__ import annotations

from pathlib import Path

from aqueduct.bridge.network.flight_server import (
    LogFlightServer,
    load_or_create_token,
    start_flight_server,
)
from aqueduct.runtime.certs import generate_certs


class FlightLogs:
    """One Flight server per log directory, all with the same certificates and token."""

    def __init__(self, tmp: Path) -> None:
        self.certs = generate_certs(tmp / "tls")
        self.token_file = tmp / "tls" / "flight.token"
        self.token = load_or_create_token(self.token_file)
        self.servers: dict[Path, LogFlightServer] = {}

    def server(self, log_dir: Path) -> LogFlightServer:
        if log_dir not in self.servers:
            self.servers[log_dir] = start_flight_server(
                log_dir, "127.0.0.1", 0, token=self.token,
                certfile=self.certs.server_cert, keyfile=self.certs.server_key,
            )  # fmt: skip
        return self.servers[log_dir]

    def address(self, log_dir: Path) -> str:
        return f"127.0.0.1:{self.server(Path(log_dir)).port}"

    def credentials(self) -> dict[str, str]:
        return {"bridgeTokenFile": str(self.token_file), "bridgeCA": str(self.certs.ca)}

    def options(self, log_dir: Path) -> dict[str, str]:
        """The options reading ``log_dir`` over Flight."""
        return {"bridge": self.address(log_dir), **self.credentials()}

    def close(self) -> None:
        for server in self.servers.values():
            server.shutdown()
        self.servers.clear()


class LogLocation:
    """``options(path)``: the source options reading ``path`` locally or through :class:`FlightLogs`."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        self.flight = FlightLogs(tmp) if kind == "bridge" else None

    def options(self, log_dir: Path) -> dict[str, str]:
        return self.flight.options(log_dir) if self.flight else {"log": str(log_dir)}

    def close(self) -> None:
        if self.flight:
            self.flight.close()
