"""The bridge: connector frames in, a durable log, Spark Structured Streaming out.

In your own Spark application: ``from aqueduct.bridge import Receiver``
(see :mod:`aqueduct.bridge.receiver`). It is loaded on first use, so that
Spark's Python workers, which import only the source, do not pay for the
listeners and the session machinery.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Receiver", "ReceiverError"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from aqueduct.bridge import receiver

        return getattr(receiver, name)
    raise AttributeError(f"module 'aqueduct.bridge' has no attribute {name!r}")
