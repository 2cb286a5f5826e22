"""The connector listeners: QUIC (Aqueduct), plain TCP and Wallaroo v3 TCP, each feeding the ingest.

The front door of the bridge: every connection gets its own sans-IO
session (:mod:`aqueduct.connector.worker`), whose events go to the
:class:`~aqueduct.bridge.ingest.service.Ingest`. Apart from the bridge's
lifetimes because the three transports differ only here (addresses,
TLS, the session class), and the bridge needs of them only "start",
"close" and where each listens.
"""

from __future__ import annotations

from aqueduct.bridge.app.config import BridgeConfig
from aqueduct.bridge.app.tls import BridgeCertificate
from aqueduct.bridge.ingest.service import Ingest
from aqueduct.connector.wallaroo.worker_session import WallarooSession
from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct
from aqueduct.connector.worker.server import WorkerServer
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig


class ConnectorListeners:
    """The listeners a bridge runs, and the address each is bound to."""

    def __init__(self) -> None:
        self.servers: list[WorkerServer] = []
        self.quic_address: tuple[str, int] | None = None
        self.tcp_address: tuple[str, int] | None = None
        self.wallaroo_address: tuple[str, int] | None = None

    async def start(self, c: BridgeConfig, ingest: Ingest, certificate: BridgeCertificate | None) -> None:
        """Listen on each configured address (``certificate``: the QUIC listener's, when there is one)."""
        # Under a shared budget the ingest grants every credit, the first ones included.
        initial = 0 if ingest.config.shares_credits else c.credits
        worker = WorkerConfig(cookie=c.cookie, initial_credits=initial)
        if c.quic is not None:
            assert certificate is not None
            server = await serve_aqueduct(
                c.quic[0], c.quic[1], ingest, worker, certfile=certificate.certfile, keyfile=certificate.keyfile,
                cafile=c.client_cafile, backend=c.quic_backend,
            )  # fmt: skip
            self.servers.append(server)
            self.quic_address = server.address
        if c.tcp is not None:
            server = await serve_tcp(c.tcp[0], c.tcp[1], ingest, worker)
            self.servers.append(server)
            self.tcp_address = server.address
        if c.wallaroo_tcp is not None:
            host, port = c.wallaroo_tcp
            server = await serve_tcp(host, port, ingest, worker, WallarooSession)
            self.servers.append(server)
            self.wallaroo_address = server.address

    async def close(self) -> None:
        """Stop accepting; sessions of closed listeners end."""
        for server in self.servers:
            await server.close()
        self.servers.clear()
