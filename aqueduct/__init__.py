"""Aqueduct: message channels that travel inside other channels, over one QUIC connection.

The public API lives in :mod:`aqueduct.runtime`; this module re-exports it so
users write ``aqueduct.channel()``, ``await aqueduct.connect(...)`` and so on.
The import is lazy so that the sans-IO layers (``aqueduct.wire``,
``aqueduct.proto``) stay importable without asyncio/aioquic being touched.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_RUNTIME_NAMES = {
    "channel",
    "oneshot",
    "serve",
    "connect",
    "Sender",
    "Receiver",
    "Server",
    "ServerConnection",
    "Mode",
    "Message",
    "Finished",
    "OneshotSender",
    "OneshotReceiver",
    "Connection",
    "CertificateRefused",
    "PayloadError",
}
_ERROR_NAMES = {
    "AqueductError",
    "LocalProtocolError",
    "RemoteProtocolError",
    "Cancelled",
    "ReceiverClosed",
    "LostInTransit",
    "ConnectionLost",
}


def __getattr__(name: str) -> Any:
    if name in _ERROR_NAMES:
        from aqueduct.proto import errors

        return getattr(errors, name)
    if name in _RUNTIME_NAMES:
        from aqueduct import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'aqueduct' has no attribute {name!r}")
