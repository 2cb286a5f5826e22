"""The bridge process's garbage collector: its start-up heap frozen, its full collections rarer.

Why: a bridge serving thousands of QUIC producers holds millions of
objects the cyclic garbage collector tracks (every session's connection,
streams, packet spaces and buffers in aioquic's Python). CPython collects
the oldest generation whenever enough objects have survived into it
(``gc.get_threshold()``'s third count of middle collections, and more
than a quarter of the old generation new since the last full collection),
and a full collection walks *every* tracked object with the event loop
stopped. In a reconnect storm the loop allocates fast, so with the
interpreter's thresholds (700, 10, 10) the old generation fills with
objects that happened to be alive at a young collection (packets in
flight, handshake state) and a full collection of the whole heap came
every few seconds, each stopping the loop for up to a second: long enough
for the UDP receive queue to overflow and producers' handshakes and
sessions to time out (docs/performance.md, "Reconnect storms").

So, once the bridge listens (its log opened: everything alive then lives
as long as the process):

- the heap is collected once and **frozen** (``gc.freeze``): no later
  collection walks the imported modules, the log's per-stream state and
  the listeners again;
- the **thresholds are raised** (:data:`THRESHOLDS`): a young collection
  every 10,000 net allocations instead of 700, so short-lived objects die
  young instead of being promoted by accident, and a full collection only
  after 20 middle ones (on top of CPython's own rule that a quarter of the
  old generation be new). Reference counting still frees everything
  acyclic at once; only cyclic garbage waits longer.

Only the ``aqueduct-bridge serve`` process does this. ``SparkBridge`` runs
inside a user's own process, whose heap and collector are the user's: a
library must not freeze or retune them, so it does neither.
"""

from __future__ import annotations

import gc

#: Collection thresholds of the serving bridge (young, middle, old); CPython's are (700, 10, 10).
THRESHOLDS = (10_000, 20, 20)


def tune_for_serving() -> int:
    """Freeze what start-up left alive and raise the collection thresholds; how many objects were frozen.

    Called once the bridge listens. The collection first keeps start-up's
    garbage out of the frozen set (frozen objects are never collected).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    return gc.get_freeze_count()
