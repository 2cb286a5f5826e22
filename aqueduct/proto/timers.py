"""Per-channel deadlines in one heap, so ``get_timer`` is O(1) with many channels.

Each key has at most one *live* deadline (the earliest asked for); moving it
earlier pushes a new heap entry and the old one goes stale, to be skipped
when popped. Stale entries cost a spurious wake-up at worst, never a miss.
"""

from __future__ import annotations

import heapq


class Timers:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int]] = []
        self._live: dict[int, float] = {}

    def schedule(self, key: int, when: float | None) -> None:
        """Wake ``key`` at ``when`` unless it is already due earlier."""
        if when is None:
            return
        cur = self._live.get(key)
        if cur is None or when < cur:
            self._live[key] = when
            heapq.heappush(self._heap, (when, key))

    def next(self) -> float | None:
        heap = self._heap
        while heap and self._live.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self, now: float) -> list[int]:
        """Keys whose live deadline is ``<= now``, each once; they are no longer scheduled."""
        due = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, key = heapq.heappop(heap)
            if self._live.get(key) == when:
                del self._live[key]
                due.append(key)
        return due
