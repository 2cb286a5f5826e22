"""What the durable log refuses or fails with: one exception per rule a caller must tell apart.

The ingest reacts to each differently (refuse a stream, fail a session,
ride out a full disk, stop the bridge), so each is its own class; they
live apart from the log's modules so every one of them raises the same.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aqueduct.bridge.storage.stream_writer import Appended


class LogError(Exception):
    """A request the log cannot honour; the message says which rule it breaks."""


class LogLocked(LogError):
    """Another process already has this log open for writing."""


class DuplicateMessage(LogError):
    """A stable message id below the point of reference or already received."""


class RecordRefused(LogError):
    """A record of an appended batch breaks a rule (an id or time beyond Spark's long, say).

    It ends the batch: the records before it stay buffered, and
    :attr:`appended` says what was done with them (``append`` returns
    nothing in this case).
    """

    def __init__(self, reason: str, appended: Appended) -> None:
        super().__init__(reason)
        self.appended = appended


class LogFull(LogError):
    """A group commit found no room on the log's file system; it is held and retried.

    Nothing of the group is visible or half written: its bytes were cut off
    again, and the next commit writes it first. Space can come back (a
    consumer lets the log truncate, an operator frees some), so this is
    ridden out, not fatal.
    """


class LogFailed(LogError):
    """A write or sync failed for another reason than space: durability is unknown, the log stops.

    After a failed fsync the kernel may have dropped the dirty pages it could
    not write and report success on the next try (PostgreSQL's 2018 fsync
    lesson), so nothing written since the last good sync can be trusted.
    Every later commit raises this too; reopening the log recovers from
    what its indexes vouch for.
    """


#: errors a group commit rides out (retrying later) instead of failing the log
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT})

__all__ = ["NO_ROOM", "DuplicateMessage", "LogError", "LogFailed", "LogFull", "LogLocked", "RecordRefused"]
