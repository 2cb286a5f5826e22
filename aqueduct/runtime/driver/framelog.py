"""qlog-like JSON-lines log of every Aqueduct frame a connection sends or receives.

Enabled per endpoint with ``frame_log="path"`` or for a whole process with the
environment variable ``AQUEDUCT_FRAME_LOG=path``; ``{pid}`` and ``{side}`` in
the path are replaced. Each line is one event::

    {"time": 12.5, "name": "aqueduct:frame_sent", "data": {"side": "client", "frame": "MESSAGE", ...}}

``time`` is milliseconds since the log was opened. The records come from the
core's ``ProtoConfig.frame_log`` hook (one dict per frame, payloads summarised
by length); this module only adds the time and writes them out. Nothing is
done per frame when no log is configured.
"""

from __future__ import annotations

import json
import os
import time
from typing import IO, Any

ENV_VAR = "AQUEDUCT_FRAME_LOG"


class FrameLog:
    """Callable sink for the core's frame records; one instance per connection."""

    def __init__(self, path: str | os.PathLike[str], side: str) -> None:
        target = os.fspath(path).replace("{pid}", str(os.getpid())).replace("{side}", side)
        # Line-buffered append: every line is one write(2) to an O_APPEND file, so
        # several connections logging to one path never interleave inside a line.
        self._file: IO[str] | None = open(target, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._side = side
        self._start = time.monotonic()

    def __call__(self, record: dict[str, Any]) -> None:
        direction = record.get("direction", "sent")
        self.event(f"frame_{direction}", {k: v for k, v in record.items() if k != "direction"})

    def event(self, name: str, data: dict[str, Any]) -> None:
        """Write one line (frames, and connection events such as the close)."""
        if self._file is None:
            return
        line = {
            "time": round((time.monotonic() - self._start) * 1000, 3),
            "name": f"aqueduct:{name}",
            "data": {"side": self._side, **data},
        }
        self._file.write(json.dumps(line, default=repr) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def open_frame_log(option: str | os.PathLike[str] | None, side: str) -> FrameLog | None:
    """The log an endpoint should use: the ``frame_log=`` option, else the env var, else none."""
    path = option if option is not None else os.environ.get(ENV_VAR)
    return FrameLog(path, side) if path else None
