"""A commit signal Spark delivers after the bridge's loop closed is dropped, not raised into Spark.

Spark's listener bus may deliver the last micro-batch's progress after the
bridge stopped and closed its loop; the error it raised came back through
py4j and Spark logged it with a Python traceback, at the end of a clean
Ctrl-C (seen in tests/spark/test_own_pipeline_job.py). Real asyncio loops,
called from another thread as Spark's listener thread calls.
"""

from __future__ import annotations

import asyncio
import threading

from aqueduct.bridge.app.spark_query import on_loop


def _from_another_thread(call: object, *args: object) -> BaseException | None:
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call(*args)  # type: ignore[operator]
        except BaseException as exc:  # noqa: BLE001 - what Spark's thread would get back
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return raised[0] if raised else None


def test_a_commit_signal_reaches_the_open_loop() -> None:
    got: list[tuple[str, dict[int, int]]] = []
    loop = asyncio.new_event_loop()
    try:
        assert _from_another_thread(on_loop(loop, lambda c, p: got.append((c, p))), "main", {1: 5}) is None
        loop.run_until_complete(asyncio.sleep(0))  # the loop runs what was handed over
        assert got == [("main", {1: 5})]
    finally:
        loop.close()


def test_a_commit_signal_after_the_loop_closed_is_dropped_quietly() -> None:
    got: list[tuple[str, dict[int, int]]] = []
    loop = asyncio.new_event_loop()
    loop.close()  # the bridge stopped
    assert _from_another_thread(on_loop(loop, lambda c, p: got.append((c, p))), "main", {1: 5}) is None
    assert got == []
