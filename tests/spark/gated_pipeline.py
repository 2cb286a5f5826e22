"""A ``--pipeline`` for ``aqueduct-bridge serve`` that holds the query's start until the test lets it go.

``build(df)`` runs once Spark's session is up, just before the bridge
starts the query it returns. It creates ``built`` in
``$AQUEDUCT_TEST_GATE``, then waits while the file ``hold`` exists there,
and returns a ``noop`` writer: until then the bridge runs no query, so
nothing can have committed a micro-batch.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

HOLD_LIMIT = 600.0  # seconds the start stays held at most: only turns a hang into a failure


def build(df: Any) -> Any:
    gate = Path(os.environ["AQUEDUCT_TEST_GATE"])
    (gate / "built").touch()
    deadline = time.monotonic() + HOLD_LIMIT
    while (gate / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return df.writeStream.format("noop")
