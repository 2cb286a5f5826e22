"""The connector wing: the connector protocol's sans-IO core, and its two sides in rooms.

The modules of this package are the sans-IO core both sides share: frames
(:mod:`.frames`), the state tables (:mod:`.states`), the session machines
(:mod:`.connector_session`, :mod:`.worker_session`, their common part
:mod:`.machine`), per-stream bookkeeping (:mod:`.outbound`, :mod:`.inbound`,
:mod:`.points`), events (:mod:`.events`), errors (:mod:`.errors`) and the
ERROR form refusing one stream (:mod:`.stream_refusal`). No module here
touches asyncio, sockets, threads or the clock.

Rooms: :mod:`.producer` (the ``Connector`` library and ``aqueduct-produce``),
:mod:`.worker` (listeners feeding a sink), :mod:`.wallaroo` (the wire of
Wallaroo's released clients). See docs/connector.md. The asyncio parts are
imported lazily so that ``aqueduct.connector`` stays importable without them.
:mod:`.client` and :mod:`.blocking` are the old paths of the producer's
modules, kept (with a warning) for one release.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "Connector": "producer.client",
    "ConnectorClosed": "errors",
    "ConnectorRefused": "errors",
    "ConnectorStream": "producer.client",
    "CreditTimeout": "errors",
    "Delivery": "producer.client",
    "TlsRefused": "errors",
    "StreamRefused": "errors",
    "Producer": "producer.blocking",
    "ORDERED": "outbound",
    "UNORDERED": "outbound",
    "UNRELIABLE": "outbound",
    "Mode": "outbound",
    "DurableStream": "inbound",
    "WorkerConfig": "worker_session",
    "WorkerSession": "worker_session",
    "ConnectorSession": "connector_session",
    "WorkerPeer": "worker.server",
    "WorkerSink": "worker.server",
    "MemorySink": "worker.memory_sink",
    "serve_tcp": "worker.tcp_listener",
    "serve_aqueduct": "worker.aqueduct_listener",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aqueduct.connector' has no attribute {name!r}")
    return getattr(import_module(f"aqueduct.connector.{module}"), name)
