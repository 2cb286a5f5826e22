"""Stopping a streaming query between micro-batches, not inside one.

``query.stop()`` interrupts the query's stream thread wherever it is. Inside
a micro-batch that aborts the batch's tasks (a Python worker prints its
``BrokenPipeError``) and, for a ``foreachBatch`` query, fails the Python
function mid-call; Spark then asks whether the stop caused that failure
with a regular expression over the long Python error, which can overflow
the thread's stack (a ``StackOverflowError`` printed by the JVM's handler
of uncaught exceptions). None of it goes through log4j, so in a user's own
driver (a :class:`~aqueduct.bridge.app.spark_bridge.SparkBridge`, whose JVM
output goes straight to the terminal) nothing can filter it.

Between micro-batches the stream thread only waits for its next trigger,
and an interrupt there ends it quietly. So once the bridge stopped taking
records (nothing new can arrive), a query is given up to a grace period to
finish the micro-batch in progress; it is stopped as soon as it is between
two, or at the end of the grace period wherever it is. A second Ctrl-C (or
SIGTERM) during the grace period ends it: the stop goes on at once.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger(__name__)

#: Seconds a query may take to finish its micro-batch in progress before a stop interrupts it.
STOP_GRACE = 10.0
#: Seconds between two looks at the query's status.
POLL = 0.05


def idle(query: Any) -> bool:
    """The query is between micro-batches (or ended): its last one committed, the next not begun.

    Spark marks a trigger active from before it plans a batch until after
    the batch committed; outside that its stream thread only sleeps until
    the next trigger. Data still waiting does not matter: it is read at the
    next start.
    """
    return not query.isActive or not query.status["isTriggerActive"]


def stop_between_batches(query: Any, deadline: float, hurry: threading.Event) -> None:
    """Stop ``query`` once it is :func:`idle`, or at ``deadline`` (``time.monotonic()``) or ``hurry``, wherever it is.

    The bridge must have stopped taking records first: a query that falls
    behind runs its batches back to back, with no gap to be seen in, until
    it has caught up with what the log holds.
    """
    between = idle(query)
    while not between and time.monotonic() < deadline and not hurry.is_set():
        time.sleep(POLL)
        between = idle(query)
    if not between:
        logger.warning(
            "query %s still in a micro-batch %s: stopping it there (the batch runs again from the "
            "checkpoint at the next start)",
            query.name or query.id, "at a second stop request" if hurry.is_set() else "at the end of the stop's grace",
        )  # fmt: skip
    if query.isActive:
        query.stop()


@contextlib.contextmanager
def stop_requests() -> Iterator[threading.Event]:
    """An event SIGINT or SIGTERM sets during the block (on the main thread; elsewhere none can); handlers put back after.

    A signal raising ``KeyboardInterrupt`` inside a py4j call would leave the
    driver's connection to the JVM mid-answer, and whatever stop follows
    could no longer talk to Spark: while waiting on queries (for them to
    end, or to finish a micro-batch during the stop's grace) a signal only
    sets this event.
    """
    requested = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: requested.set())
    try:
        yield requested
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
