"""A record's flags: the bits of a MESSAGE's flags field (spec/connector-wire.md section 1).

The wire format defines them, but they say what a record *is* (no stable id,
an epoch's end, the stream's last, ...), which the worker side, the log and
its stored columns all read: so they live with the records, and the
connector's codec (:mod:`aqueduct.connector.frames`) takes them from here.
"""

from __future__ import annotations

EPHEMERAL = 1
"""No id: never deduplicated, never moves a point of reference."""
BOUNDARY = 2
"""Closes its stream's epoch; carries no payload."""
EOS = 4
"""The last record of its stream until it is notified again."""
UNSTABLE_REFERENCE = 8
"""An id that may not be stable: not deduplicated, never moves a point of reference."""
EVENT_TIME = 16
"""The record carries an event time (microseconds since the Unix epoch)."""
KEY = 32
"""The record carries a key."""

NO_STABLE_REFERENCE = EPHEMERAL | UNSTABLE_REFERENCE
"""Either flag: not the spec's "message with a stable reference" (the log's ``stable`` column is False)."""

__all__ = ["BOUNDARY", "EOS", "EPHEMERAL", "EVENT_TIME", "KEY", "NO_STABLE_REFERENCE", "UNSTABLE_REFERENCE"]
