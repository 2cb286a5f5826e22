"""A model of a reconnect storm: the bridge's admission (its real ``HandshakeAdmission``) against a given capacity.

::

    python -m bench.admission_model --producers 2000 --capacity 50 --detect 10

Why the last producer comes back minutes after a kill when a handshake
costs milliseconds is a question about admission, not about CPU: this
model runs the bridge's own :class:`~aqueduct.runtime.retry_hint.HandshakeAdmission`
(fed each handshake's duration, as the server does) and the producers' own
retry rule (``Connector``'s capped full-jitter backoff; a random time within
the window a refusal names, its turn sent back with the next attempt)
against a server that completes ``--capacity`` handshakes a second, at
most ``--slots`` at once (the aioquic server's bound), every other Initial
refused. Nothing but the clock is simulated: no sockets, no CPU.

``--detect`` is when the producers notice the bridge is gone (a QUIC
producer hears nothing from a killed bridge and waits out its idle
timeout, 10 s; a TCP producer gets a reset at once). ``--window fixed:W``
or ``--window capacity`` replace the hint with a fixed window (retry within
W s) or with one that cheats by knowing the crowd still waiting (retry
within crowd / capacity), to say what each would buy.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
from typing import Any

from aqueduct.runtime.retry_hint import (
    MAX_WINDOW,
    MIN_WINDOW,
    Admitted,
    HandshakeAdmission,
    RetryWindow,
)

BACKOFF = (0.05, 5.0)  # Connector's default (first, cap)


def backoff(failures: int, rng: random.Random) -> float:
    """``Connector._delay``: full jitter between the first step and the current one."""
    low, high = BACKOFF
    return rng.uniform(low, min(high, low * 2 ** min(failures, 16)))


def simulate(
    producers: int, capacity: float, slots: int, detect: float, window: str, seed: int = 1, latency: float = 0.0
) -> dict[str, Any]:
    """One storm; when the producers got in, how often they were refused, the windows named.

    ``latency``: seconds a handshake takes however idle the server (its
    round trips and the client's side: on a loaded machine the producers'
    processes answer late), so at most ``slots / latency`` complete a second.
    """
    rng = random.Random(seed)
    admission = HandshakeAdmission(0.0, slots)
    events: list[tuple[float, int, int]] = []  # (time, kind 0=completed 1=attempt, producer)
    for p in range(producers):
        heapq.heappush(events, (detect + backoff(1, rng), 1, p))
    failures = [1] * producers
    turns = [b""] * producers  # the turn each producer was last named (sent back, as the connector does)
    began = [0.0] * producers  # when each producer's admitted handshake began
    in_progress = 0
    server_free = 0.0  # when the server finishes the handshakes it has admitted (one at a time)
    admitted: list[float] = []
    windows: list[float] = []
    while events:
        now, kind, p = heapq.heappop(events)
        if kind == 0:
            admission.completed(now - began[p], in_progress)
            in_progress -= 1
            admitted.append(now)
            continue
        decision = admission.admits(now, in_progress, turns[p])
        if isinstance(decision, Admitted):
            in_progress += 1
            began[p] = now
            server_free = max(server_free, now) + 1.0 / capacity
            heapq.heappush(events, (max(server_free, now + latency), 0, p))
            continue
        named = decision.window
        if window == "capacity":  # the crowd still out, spread over the time the server needs for it
            named = RetryWindow(0.0, min(MAX_WINDOW, max(MIN_WINDOW, (producers - len(admitted)) / capacity)))
        elif window.startswith("fixed:"):
            named = RetryWindow(0.0, float(window.split(":")[1]))
        turns[p] = named.turn
        windows.append(named.within)
        failures[p] += 1
        told = rng.uniform(named.not_before, named.within)
        delay = told if named.turn else max(backoff(failures[p], rng), told)  # Connector's rule
        heapq.heappush(events, (now + delay, 1, p))
    admitted.sort()
    return {
        "producers": producers,
        "capacity_per_s": capacity,
        "detect_s": detect,
        "window": window,
        "last_back_s": admitted[-1],
        "p50_back_s": admitted[len(admitted) // 2],
        "ideal_s": detect + producers / min(capacity, slots / latency if latency else capacity),  # back to back
        "refusals": len(windows),
        "turns_issued": admission.issued,  # places given in the queue: one per producer at most, however often refused
        "window_max_s": max(windows, default=0.0),
        "window_median_s": sorted(windows)[len(windows) // 2] if windows else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.admission_model", description=__doc__.split("\n\n")[1])
    p.add_argument("--producers", type=int, default=2000)
    p.add_argument("--capacity", type=float, nargs="+", default=[13.0, 50.0, 200.0], help="handshakes/s")
    p.add_argument("--slots", type=int, default=64, help="handshakes in progress at once (default 64)")
    p.add_argument("--detect", type=float, nargs="+", default=[10.0, 0.0], help="seconds until producers notice")
    p.add_argument("--window", nargs="+", default=["hint", "capacity"], help="hint | capacity | fixed:W")
    p.add_argument("--latency", type=float, default=0.0, help="seconds a handshake takes at least (client side)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rows = [
        simulate(args.producers, c, args.slots, d, w, args.seed, args.latency)
        for c in args.capacity for d in args.detect for w in args.window
    ]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        print(
            f"N={r['producers']} capacity {r['capacity_per_s']:5.0f}/s detect {r['detect_s']:4.1f} s "
            f"window {r['window']:9}: last back {r['last_back_s']:6.1f} s (p50 {r['p50_back_s']:5.1f} s, "
            f"ideal {r['ideal_s']:5.1f} s) | {r['refusals']} refusals, windows median "
            f"{r['window_median_s']:.1f} s max {r['window_max_s']:.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
