"""The bridge: connector frames in, a durable log, Spark Structured Streaming out.

In your own Spark application: ``from aqueduct.bridge import Receiver``
(see :mod:`aqueduct.bridge.receiver`), and ``repair_checkpoint`` for the
checkpoint of a query that may have been killed (see
:mod:`aqueduct.bridge.checkpoint`). They are loaded on first use, so that
Spark's Python workers, which import only the source, do not pay for the
listeners and the session machinery.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Receiver", "ReceiverError", "repair_checkpoint"]


def __getattr__(name: str) -> Any:
    if name == "repair_checkpoint":
        from aqueduct.bridge import checkpoint

        return checkpoint.repair_checkpoint
    if name in __all__:
        from aqueduct.bridge import receiver

        return getattr(receiver, name)
    raise AttributeError(f"module 'aqueduct.bridge' has no attribute {name!r}")
