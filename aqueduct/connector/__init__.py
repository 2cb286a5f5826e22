"""Connector protocol: frames, sans-IO session machines, client library, worker transports.

See docs/connector.md. The asyncio parts (client, transports) are imported
lazily so that ``aqueduct.connector.frames`` and the session machines stay
importable without touching asyncio.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "Connector": "client",
    "ConnectorClosed": "client",
    "ConnectorRefused": "client",
    "ConnectorStream": "client",
    "CreditTimeout": "client",
    "Delivery": "client",
    "TlsRefused": "client",
    "Producer": "blocking",
    "ORDERED": "outbound",
    "UNORDERED": "outbound",
    "UNRELIABLE": "outbound",
    "Mode": "outbound",
    "DurableStream": "inbound",
    "WorkerConfig": "worker_session",
    "WorkerSession": "worker_session",
    "ConnectorSession": "connector_session",
    "WorkerPeer": "worker_server",
    "WorkerSink": "worker_server",
    "MemorySink": "memory_sink",
    "serve_tcp": "tcp",
    "serve_aqueduct": "aqueduct_transport",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aqueduct.connector' has no attribute {name!r}")
    return getattr(import_module(f"aqueduct.connector.{module}"), name)
