"""Which bridge a connector serves, and when it leaves it for the next: :class:`BridgeRotation`.

The rules of moving, apart from the connection loop that follows them (and
free of the clock: the caller passes the time, so a test states them
without waiting):

- one bridge: never move; the connector retries it with its backoff;
- several: leave the current one when it refused the session as busy (it
  drains, or is at its handshake bound, and another bridge can take the
  session now), or when it has not served a session for ``move_after``
  seconds (since the last session there ended, or since the connector
  began trying it);
- the next one is the next of the list, round robin, skipping those the
  connector's other connections serve (``replicas``); with none free, the
  connector stays and retries;
- when every bridge refused as busy in a row, the move waits inside the
  last refusal's window before the next round, so a fleet of draining
  bridges is not asked in a tight loop.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from aqueduct.connector.producer.bridges import BridgeAddress
from aqueduct.runtime.retry_hint import RetryWindow

__all__ = ["BridgeRotation", "Moved"]


@dataclass(frozen=True, slots=True)
class Moved:
    """The connector left ``before`` for ``after``; it waits ``wait`` seconds before trying it."""

    before: BridgeAddress
    after: BridgeAddress
    why: str
    wait: float = 0.0


class BridgeRotation:
    """The bridge list, the one being served, and since when it has not served a session."""

    def __init__(self, bridges: tuple[BridgeAddress, ...], move_after: float, now: float, at: int = 0) -> None:
        if not move_after > 0:
            raise ValueError(f"move_after must be above 0 seconds, got {move_after}")
        self.bridges = bridges
        self.move_after = move_after
        self.at = at  # index of the current bridge
        self._unserved_since = now
        self._refused_in_a_row = 0  # bridges that refused as busy since the last session

    @property
    def current(self) -> BridgeAddress:
        return self.bridges[self.at]

    def served(self, now: float) -> None:
        """A session with the current bridge ended after its OK: it served until ``now``."""
        self._unserved_since = now
        self._refused_in_a_row = 0

    def failed(
        self, now: float, busy: RetryWindow | None, last: str, taken: frozenset[int] = frozenset()
    ) -> Moved | None:
        """An attempt or a session failed at ``now`` (``busy``: refused with that window); move, or None to retry.

        ``last`` is the failure's reason, for the move's ``why``; ``taken``
        the indexes of the bridges the connector's other connections serve.
        """
        free = self._free(taken)
        if not free:
            return None
        if busy is not None:
            why = f"refused as busy ({last})"
        elif (unserved := now - self._unserved_since) >= self.move_after:
            why = f"not served for {unserved:.1f} s (move_after {self.move_after:g} s; last: {last})"
        else:
            return None
        before = self.current
        self.at = free[0]
        self._refused_in_a_row = self._refused_in_a_row + 1 if busy is not None else 0
        wait = 0.0
        if busy is not None and self._refused_in_a_row % (len(free) + 1) == 0:  # every one it may use refused
            wait = random.uniform(busy.not_before, busy.within)
        self._unserved_since = now + wait
        return Moved(before, self.current, why, wait)

    def time_left(self, now: float, taken: frozenset[int] = frozenset()) -> float:
        """Seconds until the current bridge has been unserved for ``move_after`` (unbounded: none to move to)."""
        if not self._free(taken):
            return float("inf")
        return max(0.0, self._unserved_since + self.move_after - now)

    def _free(self, taken: frozenset[int]) -> list[int]:
        """The indexes this connection may move to, in the order it tries them (after the current one)."""
        n = len(self.bridges)
        return [i % n for i in range(self.at + 1, self.at + n) if i % n not in taken]
