"""``aqueduct-produce --rate``: records on schedule, and after a pause a catch-up at a bounded pace, not a burst.

The rule is sans-IO (:class:`~aqueduct.connector.producer.pacing.Pacing`
is told the time): the test plays a sender that sends whenever the rule
lets it, with a ten-second stall (a reconnect) in the middle.
"""

from __future__ import annotations

from aqueduct.connector.producer.pacing import BURST, CATCH_UP, Pacing

RATE = 1000.0


def run_until(pacing: Pacing, now: float, end: float) -> tuple[float, list[float]]:
    """Send every record the rule allows up to ``end``; (the time then, each record's send time)."""
    times = []
    while True:
        now += pacing.wait(now)
        if now > end:
            return end, times
        pacing.sent(now)
        times.append(now)


def most_in_window(times: list[float], window: float) -> int:
    """The most records sent within any ``window`` seconds."""
    most, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] > window:
            lo += 1
        most = max(most, hi - lo + 1)
    return most


def test_on_schedule_records_go_at_the_rate() -> None:
    pacing = Pacing(RATE, start=100.0)
    _, times = run_until(pacing, 100.0, 102.0)
    assert len(times) == 2001  # record n at 100 + n / RATE, both ends included
    assert most_in_window(times, 0.1) <= 0.1 * RATE + 1


def test_after_a_stall_the_run_catches_up_at_most_twice_the_rate_after_a_short_burst() -> None:
    pacing = Pacing(RATE, start=0.0)
    now, _ = run_until(pacing, 0.0, 1.0)
    now += 10.0  # a reconnect: nothing leaves for ten seconds, 10,000 records behind schedule
    _, times = run_until(pacing, now, now + 30.0)
    burst = sum(t == now for t in times)
    assert 1 <= burst <= BURST * CATCH_UP * RATE + 1  # 100 at once, not 10,000
    assert most_in_window(times, 1.0) <= CATCH_UP * RATE + burst
    caught_up = next(t for i, t in enumerate(times) if t <= (1001 + i) / RATE + 1e-9)  # a record no later than due
    assert caught_up - now <= 10.0 / (CATCH_UP - 1) + 0.5  # the debt repaid in about ten seconds
    assert pacing.count == 1001 + len(times) and abs(pacing.count - (now + 30.0) * RATE) <= 2  # on schedule again
