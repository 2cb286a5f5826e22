"""What a crash can leave in a Spark checkpoint, and its repair.

Spark writes each ``offsets``/``commits`` entry of a checkpoint to a hidden
``.N.<uuid>.tmp`` file (plus its ``.crc``) and renames it into place. A
SIGKILL between the two leaves the temporary file behind, and Spark 4 then
refuses to start the query (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY)
although no batch was recorded. Such files are never part of the log, so
removing them loses nothing: the entry they were about to become is simply
planned again. ``aqueduct-bridge serve`` repairs its own checkpoint on
start; a job of your own calls :func:`repair_checkpoint` on its.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)


def remove_torn_checkpoint_writes(checkpoint: Path) -> list[Path]:
    """Delete the temporary files a crash left in ``checkpoint``'s logs; the paths removed."""
    removed: list[Path] = []
    for log_dir in (checkpoint / "offsets", checkpoint / "commits"):
        if not log_dir.is_dir():
            continue
        for path in log_dir.iterdir():
            name = path.name
            if name.startswith(".") and (name.endswith(".tmp") or name.endswith(".tmp.crc")):
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def repair_checkpoint(checkpoint: str | os.PathLike[str]) -> str:
    """Make a local checkpoint directory startable after a crash; returns it for ``checkpointLocation``.

    Use it where the query is started::

        .option("checkpointLocation", repair_checkpoint("/data/ck"))
    """
    path = Path(checkpoint)
    for removed in remove_torn_checkpoint_writes(path):
        logger.warning("removed %s, a checkpoint write cut short by a crash", removed)
    return str(path)
