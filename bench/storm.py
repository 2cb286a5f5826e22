"""Storm mode of the fleet benchmark: a bridge SIGKILLed under a connected fleet, how long until it is back.

::

    python -m bench.fleet --storm --producers 2000 --transports quic --repeat 3 --json
    python -m interop.netns -- python -m bench.fleet --storm --quic-backend picoquic ...

One bridge process (``bench.fleet``'s bridge role: the real listener,
``Ingest`` and ``DurableLog`` acking what is durable) and N producers spread
over ``--procs`` processes, so what a figure costs the producers is not
charged to the bridge. Each producer sends ``--rate`` messages a second
for the whole run (ids 0, 1, ... with payloads the verdict reads back).
Once every producer has been acked, and ``--settle`` seconds later, the
bridge is SIGKILLed and restarted on the same log and port; that is one
storm, and a fleet goes through ``--repeat`` of them.

Per storm:

- ``back_s``: seconds from the kill until every producer has an ACK from
  the new bridge (its records wait until then: this *is* the outage), and
  ``back_p50_s``; the figure reported is the median and max over storms;
- ``connected_ack_p99_s``: the ACK latency (send to ACK) of records sent
  by producers that were already back, while others were still storming
  in (from the new bridge's first ACK to the last producer's). After a
  SIGKILL no producer stays connected, so "the producers already
  connected" are the ones the new bridge has admitted: their latency is
  what a storm does to the sessions a bridge already serves, measured on
  the same bridge process, loop and log as the storm;
  ``connected_send_wait_p99_s``: of that, the time ``send`` waited (for
  credits) before the record left; and the group commits that started in
  the same window (how many, their duration, the longest gap between two,
  the most streams one touched): where a stalled ACK waited;
- the new bridge's loop lag over the same window, its handshakes per
  second over time (from its sessions started), its CPU seconds, and the
  producers' CPU seconds (their processes', apart);
- the refusals the producers were told, ``busy: retry within W s``: how
  many, and the windows W named (min / median / max);
- ``lost_by``: how each producer learned that its connection to the killed
  bridge was gone (the first end after the kill): ``stateless reset`` (the
  new bridge answered its next packet), ``idle timeout`` (it heard nothing
  for its idle timeout), or ``other`` (a TCP reset, a refused attempt).

At the end every producer stops, waits for its last ACK, and exactly-once
is checked from the log read back: each stream holds ids ``0..sent-1``
once, with the bytes its producer sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
from collections import Counter
from typing import Any

from aqueduct.runtime.backends.stateless_reset import STATELESS_RESET
from bench.fleet import (
    PROGRAM,
    LagTicker,
    _json_line,
    _say,
    _spawn,
    kill_left,
    payload,
    percentile,
    producers_backend,
    producers_setup,
    role_args,
    spawn_producers,
    start_bridge,
)

ROUND = 4  # decimals of the seconds the producers report
BUSY = re.compile(r"busy: retry within ([0-9]+(?:\.[0-9]+)?) s")  # a busy bridge's refusal, as producers log it
IDLE = re.compile(r"idle timeout|no OK within", re.IGNORECASE)  # the QUIC stacks' words for silence, and the client's


def lost_by(reason: str) -> str:
    """How a producer learned its connection was gone, from the reason it logged."""
    if STATELESS_RESET in reason:
        return "stateless reset"
    return "idle timeout" if IDLE.search(reason) else "other"


# ---------------------------------------------------------------- producers' role


class Producers:
    """Producers ``first..first+count-1`` of one process, sending paced records until stopped."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.conns: dict[int, Any] = {}
        self.sent: dict[int, int] = {}  # stream -> messages sent (its ids are 0..sent-1)
        self.sent_at: dict[int, dict[int, float]] = {}  # stream -> id -> wall clock it was sent
        self.acked_at: dict[int, float] = {}  # stream -> wall clock of its latest ACK
        self.back_at: dict[int, float] = {}  # stream -> first ACK after the latest kill
        self.latencies: list[tuple[float, int, float]] = []  # (sent at, stream, latency) since the latest kill
        self.send_waits: list[tuple[float, int, float]] = []  # (sent at, stream, seconds send() waited: credits)
        self.killed = float("inf")  # wall clock of the latest kill
        self.stopping = asyncio.Event()

    def on_delivery(self, stream: int) -> Any:
        def delivered(error: Exception | None, delivery: Any) -> None:
            if error is not None:
                return
            now = time.time()
            self.acked_at[stream] = now
            sent = self.sent_at[stream].pop(delivery.message_id, None)
            if now > self.killed:
                self.back_at.setdefault(stream, now)
                if sent is not None and sent > self.killed:
                    self.latencies.append((sent, stream, now - sent))

        return delivered

    async def run_one(self, i: int, url: str, cafile: str | None) -> None:
        from aqueduct.connector.producer.client import Connector

        loop = asyncio.get_running_loop()
        conn = self.conns[i] = Connector(
            url, program=PROGRAM, instance=f"p{i}", cafile=cafile, quic_backend=producers_backend(self.args),
            on_delivery=self.on_delivery(i),
        )
        self.sent_at[i] = {}
        await conn.connect()
        stream = await conn.stream(i, f"fleet/{i}")
        n, due = stream.resume_from, loop.time()
        while not self.stopping.is_set():
            self.sent_at[i][n] = sent = time.time()
            await stream.send(payload(i, n), message_id=n)
            if sent > self.killed:
                self.send_waits.append((sent, i, time.time() - sent))
            n += 1
            self.sent[i] = n
            due = max(due + 1 / self.args.rate, loop.time())  # paced, without a catch-up burst
            try:
                await asyncio.wait_for(self.stopping.wait(), due - loop.time())
            except TimeoutError:
                pass
        await conn.wait_all_acked(self.args.limit)

    def storm_started(self, killed: float) -> float:
        """The bridge was killed at ``killed``: forget what came before; the CPU used so far."""
        self.killed = killed
        self.back_at.clear()
        self.latencies.clear()
        self.send_waits.clear()
        for conn in self.conns.values():
            conn.stats.errors.clear()  # from now on: this storm's refusals only
        return time.process_time()

    def storm_report(self, cpu_before: float) -> dict[str, Any]:
        windows = [
            float(m.group(1))
            for conn in self.conns.values() for e in conn.stats.errors if (m := BUSY.search(e))
        ]
        return {
            "back_s": sorted(round(t - self.killed, ROUND) for t in self.back_at.values()),
            "busy_windows": windows,
            "failed_attempts": sum(len(c.stats.errors) for c in self.conns.values()),
            "lost_by": Counter(lost_by(c.stats.errors[0]) for c in self.conns.values() if c.stats.errors),
            "producers_cpu_s": time.process_time() - cpu_before,
        }

    def latencies_between(self, since: float, until: float, samples: list[tuple[float, int, float]]) -> list[float]:
        """``samples`` (latencies, waits) of records sent by producers already back, between ``since`` and ``until``."""
        return [
            round(latency, ROUND) for sent, stream, latency in samples
            if since <= sent <= until and sent >= self.back_at.get(stream, float("inf"))
        ]


async def producers_role(args: argparse.Namespace) -> None:
    """Commands on stdin: ``go``, ``kill T``, ``window A B``, ``stop``; answers as JSON lines."""
    reader, url, cafile = await producers_setup(args)
    fleet = Producers(args)
    print("ready", flush=True)
    await reader.readline()  # "go"
    ticker = LagTicker()  # this process's own loop: is the load generator keeping up?
    lag = asyncio.ensure_future(ticker.run())
    started = time.time()
    mine = range(args.first, args.first + args.count)
    tasks = [asyncio.ensure_future(fleet.run_one(i, url, cafile)) for i in mine]
    while len(fleet.acked_at) < len(mine):  # every producer acked once: the fleet is up
        await asyncio.sleep(0.1)
    print(json.dumps({"all_acked_s": time.time() - started}), flush=True)
    cpu = 0.0
    while line := (await reader.readline()).decode().split():
        if line[0] == "kill":
            cpu = fleet.storm_started(float(line[1]))
            print(json.dumps({"storm_started": True}), flush=True)  # errors from now on are this storm's
            deadline = time.time() + args.limit
            while len(fleet.back_at) < len(mine) and time.time() < deadline:
                await asyncio.sleep(0.05)
            print(json.dumps(fleet.storm_report(cpu)), flush=True)
        elif line[0] == "window":
            since, until = float(line[1]), float(line[2])
            print(json.dumps({
                "latencies": fleet.latencies_between(since, until, fleet.latencies),
                "send_waits": fleet.latencies_between(since, until, fleet.send_waits),
                "producer_lag_p99_s": ticker.summary(since, until)["lag_p99_s"],
            }), flush=True)
        elif line[0] == "stop":
            fleet.stopping.set()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            errors = sorted({f"{type(e).__name__}: {e}"[:200] for e in outcomes if isinstance(e, BaseException)})
            print(json.dumps({"sent": fleet.sent, "errors": errors[:5]}), flush=True)
            break
    lag.cancel()
    await asyncio.gather(*(c.close(flush_timeout=1.0) for c in fleet.conns.values()), return_exceptions=True)


# ---------------------------------------------------------------- orchestration


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "max": max(values)} if values else {"median": 0.0, "max": 0.0}


async def _storm(
    bridge: asyncio.subprocess.Process, bridge_args: list[str], procs: list[asyncio.subprocess.Process],
    limit: float,
) -> tuple[asyncio.subprocess.Process, dict[str, Any]]:
    """One storm: SIGKILL the bridge, restart it, wait until every producer is acked again."""
    bridge.kill()
    await bridge.wait()
    killed = time.time()
    for p in procs:
        _say(p, f"kill {killed}")
    for p in procs:  # forgot the last storm's errors before the new bridge can reset anyone
        await _json_line(p, 60)
    bridge = await _spawn("--role", "bridge", *bridge_args)
    listening = await _json_line(bridge, 600)
    listening_s = time.time() - killed
    reports = [await _json_line(p, limit + 60) for p in procs]
    back = sorted(t for r in reports for t in r["back_s"])
    first_back, last_back = killed + (back[0] if back else 0.0), killed + (back[-1] if back else 0.0)
    for p in procs:
        _say(p, f"window {first_back} {last_back}")
    windows = [await _json_line(p, 60) for p in procs]
    _say(bridge, f"storm {killed} {last_back}")
    seen = await _json_line(bridge, 60)
    latencies = sorted(t for w in windows for t in w["latencies"])
    send_waits = sorted(t for w in windows for t in w["send_waits"])
    busy = sorted(w for r in reports for w in r["busy_windows"])
    handshakes = len(back)  # every producer back made one handshake that counted
    return bridge, {
        "producers_back": len(back),
        "listening_s": listening_s,
        "log_open_s": listening["log_open_s"],
        "back_s": back[-1] if back else None,
        "back_p50_s": percentile(back, 0.5),
        "connected_ack_samples": len(latencies),
        "connected_ack_p50_s": percentile(latencies, 0.5),
        "connected_ack_p99_s": percentile(latencies, 0.99),
        "connected_ack_max_s": max(latencies, default=0.0),
        "connected_send_wait_p99_s": percentile(send_waits, 0.99),
        "group_commits": seen["group_commits"],
        "bridge_lag_p99_s": seen["lag_p99_s"],
        "bridge_lag_max_s": seen["lag_max_s"],
        "handshakes_per_s": seen["handshakes_per_s"],
        "bridge_cpu_s": seen["bridge_cpu_s"] - listening["cpu_s"],
        "bridge_cpu_ms_per_producer": 1000 * (seen["bridge_cpu_s"] - listening["cpu_s"]) / max(1, handshakes),
        "producers_cpu_s": sum(r["producers_cpu_s"] for r in reports),
        "producer_lag_p99_s": max(w["producer_lag_p99_s"] for w in windows),
        "failed_attempts": sum(r["failed_attempts"] for r in reports),
        "lost_by": dict(sum((Counter(r["lost_by"]) for r in reports), Counter())),
        "busy_refusals": len(busy),
        "admission": seen["admission"],
        "bridge_gc": seen["gc"],
        "bridge_gc_tuning": {k: v for k, v in listening.items() if k.startswith("gc_")},
        "bridge_udp_drops": seen["udp_drops"],
        "bridge_udp_rcvbuf": seen["udp_rcvbuf"],
        "busy_windows_s": {
            "min": busy[0], "median": statistics.median(busy), "max": busy[-1],
            "named": Counter(round(w) for w in busy).most_common(8),
        } if busy else None,
    }


async def run_storms(args: argparse.Namespace, transport: str, n: int, certs: str) -> dict[str, Any]:
    """One fleet of ``n`` producers through ``args.repeat`` storms; every storm's figures and the verdict."""
    common = role_args(args, transport, certs)
    # --profile: the last bridge, the one stopped rather than killed, prints its cProfile (storm included)
    log_dir, bridge_args, bridge = await start_bridge(args, common)
    procs: list[asyncio.subprocess.Process] = []
    storms: list[dict[str, Any]] = []
    try:
        port = (await _json_line(bridge, 60))["port"]
        bridge_args += ["--port", str(port)]
        await spawn_producers(
            procs, "storm-producers", common, port, n, args.procs, "--rate", str(args.rate), "--limit", str(args.limit)
        )
        for p in procs:
            _say(p, "go")
        up = max([(await _json_line(p, args.limit + 60))["all_acked_s"] for p in procs])
        for k in range(args.repeat):
            await asyncio.sleep(args.settle)
            bridge, storm = await _storm(bridge, bridge_args, procs, args.limit)
            storms.append(storm)
            if not args.quiet:
                print(f"  storm {k + 1}/{args.repeat}: {_storm_line(storm)}", file=sys.stderr, flush=True)
        for p in procs:
            _say(p, "stop")
        ends = [await _json_line(p, args.limit + 60) for p in procs]
        sent = {int(k): v for e in ends for k, v in e["sent"].items()}
        _say(bridge, f"stop {json.dumps(sent)}")
        final = await _json_line(bridge, 120)
        for p in [*procs, bridge]:
            await asyncio.wait_for(p.wait(), 60)
    finally:
        await kill_left(procs, bridge, log_dir)
    backs = [s["back_s"] for s in storms if s["back_s"] is not None]
    return {
        "mode": "storm",
        "transport": transport,
        "quic_backend": args.quic_backend if transport == "quic" else None,
        "producers_quic_backend": producers_backend(args) if transport == "quic" else None,
        "producers": n,
        "processes": len(procs),
        "rate": args.rate,
        "first_connect_all_acked_s": up,
        "storms": storms,
        "back_s": _spread(backs),
        "every_producer_back": all(s["producers_back"] == n for s in storms),
        "connected_ack_p99_s": _spread([s["connected_ack_p99_s"] for s in storms]),
        "bridge_lag_p99_s": _spread([s["bridge_lag_p99_s"] for s in storms]),
        "busy_refusals": sum(s["busy_refusals"] for s in storms),
        "lost_by": dict(sum((Counter(s["lost_by"]) for s in storms), Counter())),
        "errors": sorted({e for end in ends for e in end["errors"]})[:5],
        "exactly_once": final["exactly_once_bad_count"] == 0 and final["streams"] == n
        and final["records"] == sum(sent.values()),
        "loadavg": list(os.getloadavg()),
        **final,
    }


def _storm_line(s: dict[str, Any]) -> str:
    busy = s["busy_windows_s"]
    return (
        f"{s['producers_back']} back, last {s['back_s'] or 0:.1f} s after the kill (p50 {s['back_p50_s']:.1f} s, "
        f"listening {s['listening_s']:.1f} s) | connected producers' ACK p99 {s['connected_ack_p99_s'] * 1000:.0f} ms "
        f"({s['connected_ack_samples']} records; send waited p99 {s['connected_send_wait_p99_s'] * 1000:.0f} ms) | "
        f"group commits {s['group_commits']} | bridge lag p99 {s['bridge_lag_p99_s'] * 1000:.0f} ms "
        f"max {s['bridge_lag_max_s'] * 1000:.0f} ms | handshakes/s peak {max(s['handshakes_per_s'], default=0)} | "
        f"CPU bridge {s['bridge_cpu_s']:.1f} s ({s['bridge_cpu_ms_per_producer']:.1f} ms/producer), "
        f"producers {s['producers_cpu_s']:.1f} s | lost by {s['lost_by']} | busy refusals {s['busy_refusals']}"
        + (f" (windows {busy['min']:.2f}-{busy['max']:.2f} s, median {busy['median']:.2f} s)" if busy else "")
    )


def result_line(r: dict[str, Any]) -> str:
    """One fleet's storms in a line."""
    backend = f"/{r['quic_backend']}" if r["quic_backend"] else ""
    return (
        f"storm {r['transport']}{backend} N={r['producers']} x{len(r['storms'])}: every producer acked again "
        f"after median {r['back_s']['median']:.1f} s, max {r['back_s']['max']:.1f} s | connected producers' "
        f"ACK p99 median {r['connected_ack_p99_s']['median'] * 1000:.0f} ms, max "
        f"{r['connected_ack_p99_s']['max'] * 1000:.0f} ms | bridge lag p99 max "
        f"{r['bridge_lag_p99_s']['max'] * 1000:.0f} ms | lost by {r['lost_by']} | busy refusals {r['busy_refusals']} | "
        f"exactly once: {'yes' if r['exactly_once'] else 'NO'} ({r['records']} records) | "
        f"load {r['loadavg'][0]:.1f}"
    )
