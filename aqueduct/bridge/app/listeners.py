"""The connector listeners: QUIC (Aqueduct), plain TCP and Wallaroo v3 TCP, each feeding the ingest.

The front door of the bridge: every connection gets its own sans-IO
session (:mod:`aqueduct.connector.worker`), whose events go to the
:class:`~aqueduct.bridge.ingest.service.Ingest`. Apart from the bridge's
lifetimes because the three transports differ only here (addresses,
TLS, the session class), and the bridge needs of them only "start",
"close" and where each listens.

Who a HELLO admits is the same on every listener: the shared cookie, or
with a token key or an ACL (:class:`~aqueduct.bridge.ingest.producer_auth.ProducerAuth`)
a token or a client certificate the TLS listeners verified. A plaintext
listener on a non-loopback address is logged as a warning: the cookie, the
tokens and every record cross the network in clear.
"""

from __future__ import annotations

import ipaddress
import logging

from aqueduct.bridge.app.config import BridgeConfig
from aqueduct.bridge.app.tls import BridgeCertificate
from aqueduct.bridge.ingest.producer_auth import ProducerAuth
from aqueduct.bridge.ingest.service import Ingest
from aqueduct.connector.tls import server_context
from aqueduct.connector.wallaroo.worker_session import WallarooSession
from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct
from aqueduct.connector.worker.server import WorkerServer
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig
from aqueduct.logs import fields

logger = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """Is ``host`` this machine only (``127.0.0.1``, ``::1``, ``localhost``)? A wildcard is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _warn_plaintext(name: str, address: tuple[str, int], why: str) -> None:
    if not is_loopback(address[0]):
        logger.warning(
            "the %s listener on %s:%d is plaintext: credentials and records cross the network in clear (%s)",
            name, address[0], address[1], why, extra=fields(event="plaintext_listener", listener=name),
        )  # fmt: skip


class ConnectorListeners:
    """The listeners a bridge runs, and the address each is bound to."""

    def __init__(self) -> None:
        self.servers: list[WorkerServer] = []
        self.quic_address: tuple[str, int] | None = None
        self.tcp_address: tuple[str, int] | None = None
        self.wallaroo_address: tuple[str, int] | None = None

    async def start(
        self, c: BridgeConfig, ingest: Ingest, certificate: BridgeCertificate | None, auth: ProducerAuth | None = None
    ) -> None:
        """Listen on each configured address (``certificate``: the TLS listeners', when there is one).

        ``auth``: who HELLO admits, when not the cookie (tokens, ACL-listed certificates).
        """
        # Under a shared budget the ingest grants every credit, the first ones included.
        initial = 0 if ingest.config.shares_credits else c.credits
        worker = WorkerConfig(
            cookie=c.cookie, initial_credits=initial, credentials=None if auth is None else auth.check
        )
        if c.quic is not None:
            assert certificate is not None
            server = await serve_aqueduct(
                c.quic[0], c.quic[1], ingest, worker, certfile=certificate.certfile, keyfile=certificate.keyfile,
                cafile=c.client_cafile, backend=c.quic_backend,
            )  # fmt: skip
            self.servers.append(server)
            self.quic_address = server.address
        if c.tcp is not None:
            tls = None
            if c.tcp_tls:
                assert certificate is not None
                tls = server_context(certificate.certfile, certificate.keyfile, c.client_cafile)
            server = await serve_tcp(c.tcp[0], c.tcp[1], ingest, worker, tls=tls)
            self.servers.append(server)
            self.tcp_address = server.address
            if tls is None:
                _warn_plaintext("TCP", server.address, "add --tcp-tls")
        if c.wallaroo_tcp is not None:
            host, port = c.wallaroo_tcp
            server = await serve_tcp(host, port, ingest, worker, WallarooSession)
            self.servers.append(server)
            self.wallaroo_address = server.address
            _warn_plaintext("Wallaroo v3", server.address, "its released connectors speak only plaintext")

    async def close(self) -> None:
        """Stop accepting; sessions of closed listeners end."""
        for server in self.servers:
            await server.close()
        self.servers.clear()
