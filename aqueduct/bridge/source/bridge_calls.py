"""The failover planner's calls to its bridges, made side by side: a trigger waits for the slowest, not for their sum.

A failover query asks every bridge, at every trigger, for its streams'
index changes and tells each one the query's commits
(:mod:`.failover_bridges`). One after the other, that is one round trip
per bridge per call (about 5 ms each on loopback), so planning grew
linearly with the number of bridges, and one bridge that does not answer
(a partitioned host) made every trigger wait its whole timeout on top
of the others.

:class:`BridgeCalls` runs one function per bridge on a small thread pool.
Threads, not asyncio: pyarrow Flight's Python client is blocking (its
``as_async()`` offers ``get_flight_info`` only, not the ``do_action``
and ``do_get`` the source uses), and a blocking gRPC call releases the
GIL while it waits, so N calls on threads overlap their waits
(:meth:`BridgeCalls.start` runs one without waiting for it). The pool
is bounded (:data:`CONCURRENT_CALLS`): what each call does in Python
(decoding index bytes) holds the GIL, so more threads than that would buy
nothing on a driver's cores but contention and open connections. With one
bridge, or a limit of 1, calls run inline on the caller's thread, exactly
as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["CONCURRENT_CALLS", "BridgeCalls"]

#: Bridges a failover planner calls at once.
CONCURRENT_CALLS = 16

R = TypeVar("R")


class BridgeCalls:
    """``each(names, call)``: ``call(name)`` for every name, up to ``limit`` at once (the pool is made on first use)."""

    def __init__(self, limit: int = CONCURRENT_CALLS) -> None:
        if limit < 1:
            raise ValueError(f"at least one call at a time, got {limit}")
        self.limit = limit
        self._pool: ThreadPoolExecutor | None = None

    def __getstate__(self) -> dict:
        return {"limit": self.limit, "_pool": None}  # a pool does not travel to executors

    def each(self, names: Iterable[str], call: Callable[[str], R]) -> dict[str, R]:
        """Every name's result, in the order given, once all calls ended.

        A call that raises does not stop the others: all finish first, then
        the first exception (in the order given) is raised, so no call is
        left running behind the caller's back.
        """
        names = list(names)
        if self.limit == 1 or len(names) <= 1:
            return {name: call(name) for name in names}
        futures: dict[str, Future[R]] = {name: self._started().submit(call, name) for name in names}
        errors = [f.exception() for f in futures.values()]  # waits for every call
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        return {name: f.result() for name, f in futures.items()}

    def start(self, name: str, call: Callable[[str], R]) -> Future[R]:
        """``call(name)`` on the pool, not waited for (a bridge left out is asked without holding a trigger back)."""
        return self._started().submit(call, name)

    def _started(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.limit, thread_name_prefix="aqueduct-bridge-call")
        return self._pool
