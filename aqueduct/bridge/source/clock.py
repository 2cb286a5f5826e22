"""The clock the stream reader plans by: handed in, so tests drive time instead of sleeping.

Three of the reader's decisions depend on time: ``idleWait`` (how long a
trigger that found nothing waits for the writer's change journal),
``maxTriggerDelay`` (when a batch below ``minRecordsPerTrigger`` runs
anyway) and how often an idle bridge is asked again. The reader reads the
time and sleeps only through a :class:`Clock`, the real one by default.
"""

from __future__ import annotations

import time
from typing import Protocol

#: Seconds between asking an idle bridge again while ``idleWait`` waits (a Flight call each).
REMOTE_IDLE_POLL = 0.05


class Clock(Protocol):
    """Monotonic seconds, and a way to let them pass."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """``time.monotonic`` and ``time.sleep``; picklable, as the reader is pickled into Spark's workers."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM_CLOCK = SystemClock()
