"""What a running bridge reports: :class:`BridgeProgress`, one snapshot of its counters.

A value of its own, apart from the bridge, because its readers are
elsewhere: ``serve``'s status line, :meth:`SparkBridge.progress
<aqueduct.bridge.app.spark_bridge.SparkBridge.progress>`, the demo's
display and tests compare two of them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BridgeProgress:
    """A snapshot for status lines, the demo's display and tests."""

    sessions: int
    streams: int
    messages: int  # data records received and appended
    durable_records: int  # records (boundaries included) made durable
    committed_records: int  # records below Spark's committed offsets
    lag: int  # complete-epoch records Spark has not committed
    withheld_credits: int
    batches: int  # micro-batches whose commit advanced the offsets
    duplicates: int
    disk_full: str | None = None  # why commits wait for space (credits are held meanwhile)
    draining: str | None = None  # while the bridge drains: what it waits for (aqueduct.bridge.app.drain)

    def line(self) -> str:
        full = f" | LOG DISK FULL, credits held: {self.disk_full}" if self.disk_full else ""
        full += f" | DRAINING, {self.draining}" if self.draining else ""
        return (
            f"sessions {self.sessions} | streams {self.streams} | received {self.messages:,} "
            f"| durable {self.durable_records:,} | committed {self.committed_records:,} "
            f"| lag {self.lag:,} | withheld credits {self.withheld_credits:,} "
            f"| batches {self.batches} | duplicates dropped {self.duplicates:,}{full}"
        )
