"""The asyncio runtime: public handles, endpoints and the payload codec.

``aqueduct`` re-exports these names (``aqueduct.channel()``,
``await aqueduct.connect(...)``); the sans-IO layers never import this package.
Endpoints are imported lazily so local channels work without aioquic loaded.

Three rooms, each importing only the ones before it: ``handles/`` (what
users hold: Sender, Receiver, Message, headers, the payload codec),
``driver/`` (drives the sans-IO core over one connection and links it to
the handles) and ``backends/`` (the QUIC stacks). The driver and the
backends meet only at the seam, :mod:`.transport`; :mod:`.endpoints`
(``serve()`` / ``connect()``) is the one place that picks a backend and
wires the three together.
"""

from __future__ import annotations

from typing import Any

from aqueduct.runtime.handles import (
    Finished,
    Message,
    Mode,
    OneshotReceiver,
    OneshotSender,
    Receiver,
    Sender,
    channel,
    oneshot,
)
from aqueduct.runtime.handles.headers import HeaderContext
from aqueduct.runtime.handles.payload import PayloadError

_ENDPOINT_NAMES = {"serve", "connect", "Server", "ServerConnection", "Connection", "CertificateRefused"}

__all__ = [
    "CertificateRefused",
    "Connection",
    "Finished",
    "HeaderContext",
    "Message",
    "Mode",
    "OneshotReceiver",
    "OneshotSender",
    "PayloadError",
    "Receiver",
    "Sender",
    "Server",
    "ServerConnection",
    "channel",
    "connect",
    "oneshot",
    "serve",
]


def __getattr__(name: str) -> Any:
    if name in _ENDPOINT_NAMES:
        from aqueduct.runtime import endpoints

        return getattr(endpoints, name)
    raise AttributeError(f"module 'aqueduct.runtime' has no attribute {name!r}")
