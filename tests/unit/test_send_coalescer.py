"""When the runtime flushes application sends (``aqueduct.runtime.driver.coalesce``), on a real event loop.

What a user relies on: a lone send leaves at the next turn of the loop,
exactly as without coalescing; a burst is flushed in few flushes but never
held longer than the bound; a sender that stops is flushed at once.
"""

from __future__ import annotations

import asyncio

from aqueduct.runtime.driver.coalesce import SendCoalescer


class Flushes:
    """Counts flushes and tells the coalescer, as the driver's transmit does."""

    def __init__(self, loop: asyncio.AbstractEventLoop, **kwargs: float) -> None:
        self.count = 0
        self.coalescer = SendCoalescer(loop, self.flush, **kwargs)  # type: ignore[arg-type]

    def flush(self) -> None:
        self.count += 1
        self.coalescer.flushed()


async def turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_lone_send_is_flushed_at_the_next_turn() -> None:
    f = Flushes(asyncio.get_running_loop())
    f.coalescer.sent(100)
    assert f.count == 0
    await turns(2)
    assert f.count == 1


async def test_an_empty_message_is_flushed_too() -> None:
    """A zero-byte payload (raw b"" under an octet-stream default) still counts as waiting."""
    f = Flushes(asyncio.get_running_loop())
    f.coalescer.sent(0)
    await turns(2)
    assert f.count == 1


async def test_one_send_per_turn_is_flushed_every_turn() -> None:
    f = Flushes(asyncio.get_running_loop(), max_delay=60.0)
    for expected in range(1, 6):
        f.coalescer.sent(100)
        await turns(2)
        assert f.count == expected


async def test_a_burst_across_turns_waits_until_max_bytes() -> None:
    f = Flushes(asyncio.get_running_loop(), max_bytes=16 * 100, max_delay=60.0)
    for _ in range(4):  # 4 turns of 4 messages: 1,600 bytes only with the last one
        for _ in range(4):
            f.coalescer.sent(100)
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert f.count == 1


async def test_a_burst_is_held_at_most_max_delay() -> None:
    loop = asyncio.get_running_loop()
    f = Flushes(loop, max_bytes=1 << 30, max_delay=0.02)
    began = loop.time()
    while f.count == 0 and loop.time() - began < 5.0:  # bounded: a bug fails, never hangs
        f.coalescer.sent(10)
        f.coalescer.sent(10)
        await asyncio.sleep(0)
    assert f.count == 1
    assert loop.time() - began >= 0.02


async def test_a_sender_that_stops_is_flushed_at_the_next_turn() -> None:
    f = Flushes(asyncio.get_running_loop(), max_delay=60.0)
    for _ in range(3):
        for _ in range(8):
            f.coalescer.sent(100)
        await asyncio.sleep(0)
    assert f.count == 0  # still sending: held
    await turns(2)  # the application sent nothing during a turn
    assert f.count == 1


async def test_another_flush_takes_everything_and_the_check_does_nothing() -> None:
    f = Flushes(asyncio.get_running_loop())
    f.coalescer.sent(100)
    f.flush()  # e.g. a received packet made the driver flush
    await turns(3)
    assert f.count == 1


async def test_cancel_drops_the_pending_flush() -> None:
    f = Flushes(asyncio.get_running_loop())
    f.coalescer.sent(100)
    f.coalescer.cancel()
    await turns(3)
    assert f.count == 0
