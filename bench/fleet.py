"""Fleet benchmark: thousands of producers connecting to one bridge in one burst.

::

    python -m bench.fleet --producers 100 1000 --transports quic tcp --json

For each transport and fleet size N, a bridge process (the real ingest:
connector listener, ``Ingest`` and ``DurableLog`` with group commit and
fsync, in a temporary directory) is started, then N producers, each a
``Connector`` with one stream, run as asyncio tasks spread over a few
processes (``--procs``). They are released together (one burst), each sends
``--messages`` messages paced at ``--rate`` per second, waits until all are
acknowledged and then stays connected, idle, until every producer is done:
the bridge's RSS is then sampled with all N sessions open.

There is no Spark: the bridge acknowledges a record as soon as it is
durable (an infinitely fast Spark), and **exactly-once is checked from the
log, read back**: every producer's stream must hold exactly ids
``0..messages-1``, in order, each with the payload its producer sent
(read from the segments, not taken from the log's own counters).

Reported per run: producers connected / failed, their connection retries,
handshakes per second (N over the time from the burst to the last first
handshake), the bridge loop's lag (p50 / p99 / max of a 10 ms ticker's
overshoot during the run), bridge RSS before, with all sessions idle, and
the peak, the RSS per session, and the exactly-once verdict; and, to tell a
bridge that drops sessions from a load generator that cannot keep up, the
producers' reconnects, why their sessions ended (the commonest reasons) and
the lag of the producer processes' own loops.

``--credentials cookie token`` runs each fleet twice, in the same run:
admitted by the shared cookie (none, here), and by signed producer tokens
(each producer its own, ``fleet-<i>``, verified by the bridge with the
public key: ``serve --token-key``), so ``handshakes_per_s`` of the two
says what verifying tokens costs a fleet connecting at once.

``--restart-after S`` SIGKILLs the bridge S seconds after the burst and
starts another on the same log and port, as after a crash with the fleet
running: every producer reconnects with its backoff and resumes from the
points of reference the log hands back. The run then also reports the
streams the new bridge found in its log, how long opening the log took and
how long after the kill it listened again; exactly-once is checked by the
second bridge, over everything both received. Once every producer is done
(whether the kill came while they sent or once they were idle), each must
be connected to the new bridge again: the run reports how many were
(``reconnected_after_restart``) and when the last one was
(``last_reconnect_s``, from the kill). That is when the whole workload
is done, not when the fleet was back: a producer's outage ends at its
first ACK from the new bridge, and the run reports that too
(``back_s``: the kill to the last producer's first ACK after it, with
``back_p50_s``; ``back_without_ack`` counts the producers with no ACK
after the kill: nothing left to send then, or failed, which ``failed``
and ``acked_producers`` tell apart).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

TICK = 0.01  # the lag ticker's period (seconds)
PROGRAM = "fleet"


# ---------------------------------------------------------------- measurements


_statm: int | None = None


def rss_bytes() -> int:
    """This process's resident set size now (Linux /proc).

    The file stays open: a bridge out of file descriptors must still report.
    """
    global _statm
    if _statm is None:
        _statm = os.open("/proc/self/statm", os.O_RDONLY)
    return int(os.pread(_statm, 200, 0).split()[1]) * os.sysconf("SC_PAGE_SIZE")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class LagTicker:
    """How late the event loop runs a 10 ms timer: the loop's responsiveness.

    Each sample keeps its wall-clock time, so a storm's own window can be
    told apart from the quiet before and after it.
    """

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.stamps: list[float] = []  # wall clock of each sample

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(TICK)
            self.samples.append(max(0.0, loop.time() - before - TICK))
            self.stamps.append(time.time())

    def summary(self, since: float = 0.0, until: float = float("inf")) -> dict[str, float]:
        """Lag p50 / p99 / max of the samples taken between ``since`` and ``until`` (wall clock)."""
        s = self.samples
        if since > 0.0 or until < float("inf"):
            s = [lag for lag, at in zip(s, self.stamps, strict=True) if since <= at <= until]
        return {
            "lag_p50_s": percentile(s, 0.50),
            "lag_p99_s": percentile(s, 0.99),
            "lag_max_s": max(s, default=0.0),
        }


# ---------------------------------------------------------------- bridge role


async def bridge_role(args: argparse.Namespace) -> None:
    """Serve connectors into a durable log; answer ``report`` and ``stop`` on stdin."""
    from aqueduct.bridge.ingest.service import Ingest
    from aqueduct.bridge.storage.log import DurableLog
    from aqueduct.connector.events import RecordsAccepted

    #: each group commit: (wall clock at its start, its seconds, streams it touched, seconds its
    #: oldest record had waited in the bridge when it became durable)
    commits: list[tuple[float, float, int, float]] = []

    class AckingIngest(Ingest):
        """The bridge's ingest, committed downstream the moment it is durable."""

        oldest: float | None = None  # when the oldest record not in a group commit yet arrived (perf_counter)

        async def handle(self, peer: Any, event: Any) -> None:
            if self.oldest is None and isinstance(event, RecordsAccepted):
                self.oldest = time.perf_counter()
            await super().handle(peer, event)

        async def group_commit(self) -> dict[int, int]:
            started, began = time.time(), time.perf_counter()
            oldest, self.oldest = self.oldest, None  # later records go to the next group
            ends = await super().group_commit()  # no boundaries: every record is its own epoch
            self.on_committed(ends)
            self.truncate_below(ends)
            if ends:
                done = time.perf_counter()
                commits.append((started, done - began, len(ends), done - (oldest or began)))
            return ends

    ticker = LagTicker()
    gc_pauses = GcPauses()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aqueduct-fleet-") as tmp:
        log = DurableLog(args.log or Path(tmp) / "log", **({"max_open_streams": args.max_open_streams} if args.max_open_streams else {}))
        opened = time.perf_counter() - started
        ingest = AckingIngest(log)
        # A bridge restarted on a log: Spark (infinitely fast) committed all that is durable.
        ingest.on_committed({sid: log.durable_end(sid) for sid in log.stream_ids()})
        tasks = [asyncio.ensure_future(ingest.run()), asyncio.ensure_future(ticker.run())]
        port = args.port or 0
        config = _worker_config(args)
        if args.transport == "tcp":
            from aqueduct.connector.worker.tcp_listener import serve_tcp

            server = await serve_tcp("127.0.0.1", port, ingest, config)
        else:
            from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct
            from aqueduct.runtime.certs import cert_paths
            from bench.common import listen_host

            certs = cert_paths(args.certs)
            server = await serve_aqueduct(
                listen_host(args.quic_backend), port, ingest, config, certfile=certs.server_cert,
                keyfile=certs.server_key, backend=args.quic_backend,
                **({"max_handshakes": args.max_handshakes} if args.max_handshakes else {}),
            )
        quic = quic_server()
        slots = SlotWatch(quic)
        tuned = {}
        if args.gc == "serve":  # as `aqueduct-bridge serve` does once it listens
            from aqueduct.bridge.app.gc_tuning import tune_for_serving

            began = time.perf_counter()
            tuned = {"gc_frozen_objects": tune_for_serving(), "gc_tuning_s": time.perf_counter() - began}
        baseline = peak = rss_bytes()  # listening, no session yet
        listening_cpu = time.process_time()
        print(json.dumps({
            "port": server.port,
            **tuned,
            "streams_at_start": len(log.stream_ids()),
            "log_open_s": opened,
            "cpu_s": time.process_time(),  # imports and opening the log: not the storm's
            "listening_s": time.perf_counter() - started,
        }), flush=True)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

        handshakes: list[tuple[float, int]] = []  # (wall clock, sessions started so far), every 0.25 s

        async def watch() -> None:
            nonlocal peak
            cpu, at = time.process_time(), time.perf_counter()
            while True:
                for _ in range(2):
                    await asyncio.sleep(0.25)
                    handshakes.append((time.time(), ingest.counters.sessions_started))
                    slots.sample()
                peak = max(peak, rss_bytes())
                if not args.quiet:
                    c = ingest.counters
                    busy = (time.process_time() - cpu) / (time.perf_counter() - at)
                    cpu, at = time.process_time(), time.perf_counter()
                    print(
                        f"  bridge: sessions {c.sessions} messages {c.messages} "
                        f"lag p99 {ticker.summary()['lag_p99_s'] * 1000:.0f} ms "
                        f"rss {rss_bytes() / 1e6:.0f} MB cpu {busy:.0%}",
                        file=sys.stderr,
                        flush=True,
                    )

        tasks.append(asyncio.ensure_future(watch()))
        try:
            while line := (await reader.readline()).decode().strip():
                if line == "report":  # every producer is done and idle
                    now = rss_bytes()
                    peak = max(peak, now)
                    sessions = ingest.counters.sessions
                    committed = ingest.committed_offsets()
                    print(json.dumps({
                        # every producer is done: a stream still behind here is a lost ack or a stuck record
                        "streams_not_acked": [
                            (sid, committed.get(sid, 0), log.durable_end(sid))
                            for sid in log.stream_ids() if committed.get(sid, 0) < log.durable_end(sid)
                        ][:20],
                        "buffered_records": ingest.buffered,
                        "sessions_idle": sessions,
                        "rss_baseline_mb": baseline / 1e6,
                        "rss_idle_mb": now / 1e6,
                        "rss_per_session_kb": (now - baseline) / max(1, sessions) / 1e3,
                        "admission": admission_summary(quic),
                        "handshake_slots": slots.summary(),
                        "bridge_cpu_s": time.process_time() - listening_cpu,  # since it listened
                        "gc": gc_pauses.summary(ticker),
                        **udp_socket(quic, server.port),
                        **ticker.summary(),
                    }), flush=True)
                elif line == "cpu":  # this process's CPU seconds so far (bench.handshake_cost)
                    print(json.dumps({"cpu_s": time.process_time()}), flush=True)
                elif line.startswith("storm "):  # a storm's window (wall clock): what this bridge did in it
                    since, until = map(float, line.split()[1:])
                    print(json.dumps({
                        "group_commits": commit_summary(commits, since, until),
                        "handshakes_per_s": per_second(handshakes, since, until),
                        "bridge_cpu_s": time.process_time(),
                        "sessions": ingest.counters.sessions,
                        "admission": admission_summary(quic),
                        "handshake_slots": slots.summary(since, until),
                        "gc": gc_pauses.summary(ticker, since, until),
                        **udp_socket(quic, server.port),
                        **ticker.summary(since, until),
                    }), flush=True)
                elif line.startswith("stop "):
                    await ingest.group_commit()
                    counts = json.loads(line.split(maxsplit=1)[1])  # messages per producer: one count or {stream: count}
                    expected = {int(k): v for k, v in counts.items()} if isinstance(counts, dict) else counts
                    print(json.dumps({
                        "rss_peak_mb": peak / 1e6,
                        **verify(log, expected),
                    }), flush=True)
                    break
        finally:
            await server.close()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            log.close()


class GcPauses:
    """How long the garbage collector held the bridge's loop, and how much of the loop's stalls it was.

    A full collection of a heap of thousands of sessions stops the loop
    (and the reading of the UDP socket) for as long as it takes. Each
    collection is kept with its wall-clock span, so the loop's stalls (the
    lag ticker's samples over ``STALL``) can be split into the time a
    collection ran inside them and the rest.
    """

    STALL = 0.05  #: a lag sample at least this long is a stall of the loop (seconds)

    def __init__(self) -> None:
        import gc

        self._began = 0.0
        self.collections: list[tuple[float, float, int]] = []  # (wall clock at its start, seconds, generation)
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.time()
            return
        self.collections.append((self._began, time.time() - self._began, info["generation"]))

    def summary(self, ticker: LagTicker, since: float = 0.0, until: float = float("inf")) -> dict[str, Any]:
        """Collections by generation, their seconds, the longest; the loop's stalls and the GC's share of them."""
        mine = [c for c in self.collections if since <= c[0] <= until]
        count, seconds = [0, 0, 0], [0.0, 0.0, 0.0]
        for _, took, generation in mine:
            count[generation] += 1
            seconds[generation] += took
        stalls = [
            (at - lag - TICK, at) for lag, at in zip(ticker.samples, ticker.stamps, strict=True)
            if lag >= self.STALL and since <= at <= until
        ]  # fmt: skip
        in_stalls = [0.0, 0.0, 0.0]
        for start, took, generation in mine:  # a collection's time inside any stall (stalls do not overlap)
            in_stalls[generation] += sum(max(0.0, min(start + took, b) - max(start, a)) for a, b in stalls)
        return {
            "collections": count,
            "seconds": [round(s, 3) for s in seconds],
            "longest_s": round(max((c[1] for c in mine), default=0.0), 3),
            "stalls": len(stalls),
            "stall_s": round(sum(b - a for a, b in stalls), 3),
            "stall_gc_s": [round(s, 3) for s in in_stalls],
            **_tracked_objects(),
        }


def _tracked_objects() -> dict[str, int]:
    """Objects the collector tracks now, apart from those frozen (which no collection visits)."""
    import gc

    return {"tracked_objects": sum(len(gc.get_objects(g)) for g in range(3)), "frozen_objects": gc.get_freeze_count()}


def quic_server() -> Any:
    """The aioquic server of this bridge process, or None (TCP, picoquic).

    The listener exposes only handshake counts, so the server is found among
    this process's objects (a benchmark's look inside), once, before the
    bridge's collector tuning freezes it out of ``gc.get_objects``.
    """
    import gc

    from aqueduct.runtime.backends.quic_server import BoundedQuicServer

    return next((o for o in gc.get_objects() if isinstance(o, BoundedQuicServer)), None)


class SlotWatch:
    """How long the aioquic server's handshakes held their slots, and how many held one (every 0.25 s).

    A handshake holds a slot from its first Initial until its Aqueduct
    handshake completes or fails, or its client goes silent: the time
    admission divides by (Little's law). Told through the server's own
    ``admission.completed``, wrapped here (a benchmark's look inside).
    """

    def __init__(self, server: Any) -> None:
        self.server = server
        self.held: list[tuple[float, float]] = []  # (wall clock freed, seconds held)
        self.in_progress: list[tuple[float, int]] = []  # (wall clock, handshakes holding a slot)
        if server is not None:
            server.admission = _Counted(server.admission, self.held)

    def sample(self) -> None:
        if self.server is not None:
            self.in_progress.append((time.time(), len(self.server._handshaking)))

    def summary(self, since: float = 0.0, until: float = float("inf")) -> dict[str, float]:
        held = [d for at, d in self.held if since <= at <= until]
        busy = [n for at, n in self.in_progress if since <= at <= until]
        if not held:
            return {}
        return {
            "freed": len(held),
            "held_p50_s": round(percentile(held, 0.5), 3),
            "held_p90_s": round(percentile(held, 0.9), 3),
            "held_max_s": round(max(held), 3),
            "in_progress_mean": round(sum(busy) / max(1, len(busy)), 1),
            "in_progress_max": max(busy, default=0),
        }


class _Counted:
    """A server's admission, told every freed slot as before, which also keeps (wall clock, seconds held)."""

    def __init__(self, admission: Any, held: list[tuple[float, float]]) -> None:
        self._admission, self._held = admission, held

    def completed(self, duration: float, in_progress: int) -> None:
        self._held.append((time.time(), duration))
        self._admission.completed(duration, in_progress)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._admission, name)


def admission_summary(server: Any) -> dict[str, float]:
    """What the aioquic ``server``'s admission did: refusals, those naming their turn, expired handshakes, its rate.

    The rate is the one its latest refusal was paced at (None: it refused
    nobody), not its estimate at the end, which extrapolates the quiet
    handshakes after the storm (thousands a second).

    Empty on TCP and picoquic, which refuse nobody.
    """
    if server is None:
        return {}
    return {
        "refused": server.refused,
        "refused_naming_their_turn": server.turns_kept,
        "handshakes_expired": server.expired,
        "turns_issued": server.admission.issued,
        "paced_at_per_s": server.admission.paced_at,
    }


def udp_socket(server: Any, port: int) -> dict[str, int]:
    """The aioquic ``server``'s UDP socket: the receive buffer the kernel granted and the datagrams it dropped.

    ``udp_drops`` is the ``drops`` column of ``/proc/net/udp`` for ``port``
    (datagrams that found the receive queue full, however the socket is
    served: picoquic's too); ``udp_rcvbuf`` is 0 where the socket is not
    aioquic's.
    """
    import socket

    drops = 0
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                drops += int(fields[-1])
    sock = server._transport.get_extra_info("socket") if server is not None else None
    granted = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) if sock is not None else 0
    return {"udp_drops": drops, "udp_rcvbuf": granted}


def commit_summary(commits: list[tuple[float, float, int, float]], since: float, until: float) -> dict[str, float]:
    """The group commits that started between ``since`` and ``until``.

    How many, how long each took, how far apart they started, how many
    streams one touched at most, and how long a group's oldest record had
    waited in the bridge when it became durable (p99, max): the bridge's
    share of an ACK's latency, apart from the producers'.
    """
    mine = [c for c in commits if since <= c[0] <= until]
    starts = [c[0] for c in mine]
    seconds = [c[1] for c in mine]
    waited = [c[3] for c in mine]
    return {
        "count": len(mine),
        "seconds_p50": round(percentile(seconds, 0.5), 4),
        "seconds_max": round(max(seconds, default=0.0), 4),
        "gap_max_s": round(max((b - a for a, b in itertools.pairwise(starts)), default=0.0), 4),
        "streams_max": max((c[2] for c in mine), default=0),
        "oldest_waited_p99_s": round(percentile(waited, 0.99), 4),
        "oldest_waited_max_s": round(max(waited, default=0.0), 4),
    }


def _worker_config(args: argparse.Namespace) -> Any:
    """The listener's policy: tokens verified with ``--token-key`` (a token run), else no cookie."""
    from aqueduct.connector.worker_session import WorkerConfig

    if args.token_key is None:
        return WorkerConfig()
    from aqueduct.bridge.ingest.producer_auth import ProducerAuth

    return WorkerConfig(credentials=ProducerAuth(Path(args.token_key)).check)


def _tokens(args: argparse.Namespace) -> dict[int, str]:
    """Each producer's own token, signed with ``--token-signer`` (a token run), issued before the burst."""
    if args.token_signer is None:
        return {}
    from aqueduct.auth import issue_token, load_private_key

    key = load_private_key(Path(args.token_signer).read_bytes())
    now = int(time.time())
    return {
        i: issue_token(key, subject=f"fleet-{i}", programs=(f"{PROGRAM}/*",), streams=("fleet/*",), now=now,
                       lifetime=86400)
        for i in range(args.first, args.first + args.count)
    }  # fmt: skip


def per_second(counts: list[tuple[float, int]], since: float, until: float) -> list[int]:
    """Increments per whole second after ``since`` of a running total sampled as (wall clock, total)."""
    seconds = max(1, int(until - since + 0.999))
    totals = [0] * (seconds + 1)  # the total at the end of each second (and before the first)
    inside = [(at, total) for at, total in counts if at <= until]
    for at, total in inside:
        totals[min(seconds, max(0, int(at - since + 1)))] = total
    for k in range(1, seconds + 1):  # a second without a sample keeps the total it had
        totals[k] = max(totals[k], totals[k - 1])
    return [totals[k] - totals[k - 1] for k in range(1, seconds + 1)]


def payload(stream_id: int, message_id: int) -> bytes:
    """What producer ``stream_id`` sends as message ``message_id`` (the verdict reads it back)."""
    return b"%d:%d" % (stream_id, message_id)


def verify(log: Any, expected: int | dict[int, int]) -> dict[str, Any]:
    """Exactly-once from the log read back: each stream holds ids ``0..expected-1`` once, with their payloads.

    ``expected`` is one count for every stream, or each stream's own (a
    storm's producers send until told to stop, each as far as it got).

    The records are read from the log's files (the committed index and
    segments), not taken from its counters: a stream whose records or
    bytes differ from what its producer sent is bad, and so is one whose
    first records were truncated away (nothing left to compare).
    """
    bad = []
    records = 0
    for sid in log.stream_ids():
        view = log.snapshot(sid)
        got: list[tuple[int, bytes]] = []
        for batch in view.read(view.earliest, view.end):
            d = batch.to_pydict()
            got += [(m, p) for m, p, b in zip(d["message_id"], d["payload"], d["boundary"], strict=True) if not b]
        records += len(got)
        count = expected if isinstance(expected, int) else expected.get(sid, 0)
        want = [(n, payload(sid, n)) for n in range(count)]
        if view.earliest > 0 or got != want:
            wrong = next((i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w), min(len(got), len(want)))
            bad.append({"stream": sid, "records": len(got), "first_wrong_index": wrong, "truncated_below": view.earliest})
    return {
        "streams": len(log.stream_ids()),
        "records": records,
        "exactly_once_bad_streams": bad[:20],
        "exactly_once_bad_count": len(bad),
    }


# ---------------------------------------------------------------- producer role


def _dump_tasks() -> None:
    """On SIGUSR1: how many tasks wait where (their innermost frames), on stderr."""
    where: Counter[str] = Counter()
    for task in asyncio.all_tasks():
        chain, coro = [], task.get_coro()
        while coro is not None and len(chain) < 10:  # follow what each coroutine awaits
            frame = getattr(coro, "cr_frame", None)
            if frame is not None:
                chain.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
            coro = getattr(coro, "cr_await", None)
        where[" -> ".join(chain)] += 1
    for stack, count in where.most_common(15):
        print(f"tasks {count:6}: {stack}", file=sys.stderr, flush=True)


def producers_backend(args: argparse.Namespace) -> str:
    """The producers' QUIC stack: ``--producers-quic-backend``, else the bridge's."""
    return args.producers_quic_backend or args.quic_backend


async def producers_setup(args: argparse.Namespace) -> tuple[asyncio.StreamReader, str, str | None]:
    """A producers' process: its commands (stdin), the bridge's URL and the CA file that verifies it."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    scheme = "tcp" if args.transport == "tcp" else "aqueduct"
    cafile = None
    if args.transport == "quic":
        from aqueduct.runtime.certs import cert_paths

        cafile = str(cert_paths(args.certs).ca)
    return reader, f"{scheme}://127.0.0.1:{args.port}", cafile


async def producer_role(args: argparse.Namespace) -> None:
    """Run producers ``first..first+count-1``; start on ``go``, close on ``close`` (stdin)."""
    from aqueduct.connector.producer.client import Connector

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)  # where is a stuck producer process waiting?
    reader, url, cafile = await producers_setup(args)
    release = asyncio.Event()
    results: list[dict[str, Any]] = []

    streams: dict[int, Any] = {}
    acked_at: dict[int, list[float]] = {}  # producer -> wall clock of each ACK, in order

    def on_delivery(i: int) -> Any:
        times = acked_at[i] = []

        def delivered(error: Exception | None, delivery: Any) -> None:
            if error is None:
                times.append(time.time())

        return delivered

    async def send(conn: Connector, i: int) -> None:
        """Open the producer's stream, send its paced messages, wait for their acks."""
        stream = streams[i] = await conn.stream(i, f"fleet/{i}")
        start = loop.time()
        for n in range(stream.resume_from, args.messages):
            await stream.send(payload(i, n), message_id=n)
            delay = start + (n + 1) / args.rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
        await conn.wait_all_acked()

    conns: dict[int, Connector] = {}
    tokens = _tokens(args)

    async def one(i: int, burst: float) -> None:
        conn = conns[i] = Connector(
            url, program=PROGRAM, instance=f"p{i}", cafile=cafile, quic_backend=producers_backend(args),
            cookie=tokens.get(i, b""), on_delivery=on_delivery(i),
        )
        out: dict[str, Any] = {"connected": False}
        try:
            await asyncio.wait_for(conn.connect(), args.limit)
            out["connected"] = True
            out["connect_s"] = time.time() - burst
            await asyncio.wait_for(send(conn, i), args.limit)
            out["acked"] = True
        except Exception as exc:  # noqa: BLE001 - every failure is a figure of the run
            out["error"] = f"{type(exc).__name__}: {exc}"[:200]
            if (stream := streams.get(i)) is not None:  # where it stood, to tell a lost ack from unsent data
                out["stuck"] = {
                    "stream": i, "next_id": stream.next_id, "acked": stream.acked,
                    "unacked": stream.unacked, "resume_from": stream.resume_from,
                    "connected": conn.connected, "sessions": conn.stats.connections,
                }
        out["retries"] = conn.stats.retries
        out["sessions"] = conn.stats.connections
        out["ended"] = [reason[:80] for reason in conn.stats.errors]
        results.append(out)
        try:
            await release.wait()
        finally:
            await conn.close(flush_timeout=1.0)

    print("ready", flush=True)
    line = (await reader.readline()).decode().split()
    burst = float(line[1])  # wall clock of the burst, the same in every process
    await asyncio.sleep(max(0.0, burst - time.time()))
    ticker = LagTicker()  # a producer process's own loop: is the load generator keeping up?
    lag = asyncio.ensure_future(ticker.run())
    tasks = [asyncio.ensure_future(one(i, burst)) for i in range(args.first, args.first + args.count)]
    while len(results) < len(tasks):
        await asyncio.sleep(0.2)
    lag.cancel()
    connect = [r["connect_s"] for r in results if r["connected"]]
    errors = sorted({r["error"] for r in results if "error" in r})
    print(json.dumps({
        "connected": len(connect),
        "acked": sum(1 for r in results if r.get("acked")),
        "retries": sum(r["retries"] for r in results),
        "reconnects": sum(max(0, r["sessions"] - 1) for r in results),
        "last_connect_s": max(connect, default=0.0),
        "connect_s": sorted(connect),
        "errors": errors[:5],
        "producer_lag_p99_s": ticker.summary()["lag_p99_s"],
        "why_sessions_ended": Counter(e for r in results for e in r["ended"]).most_common(5),
        "stuck": [r["stuck"] for r in results if "stuck" in r][:10],
    }), flush=True)
    line = (await reader.readline()).decode().split()
    if line and line[0] == "reconnected":  # after a restart: is every producer back?
        killed, deadline = float(line[1]), time.time() + args.limit
        while time.time() < deadline and not all(c.connected for c in conns.values()):
            await asyncio.sleep(0.2)
        back = sorted(  # each producer's first ACK from the new bridge (the old one acks nothing after its kill)
            first - killed for times in acked_at.values() if (first := next((t for t in times if t > killed), None))
        )
        print(json.dumps({
            "reconnected": sum(c.connected for c in conns.values()),
            "last_reconnect_s": time.time() - killed,
            "back_s": back,
            "back_without_ack": len(acked_at) - len(back),
        }), flush=True)
        await reader.readline()  # "close"
    release.set()
    await asyncio.gather(*tasks, return_exceptions=True)


# ---------------------------------------------------------------- orchestration


async def _spawn(*role: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.fleet", *role,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        limit=16 * 1024 * 1024,
    )


async def _json_line(proc: asyncio.subprocess.Process, timeout: float) -> Any:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout)
    if not line:
        raise RuntimeError(f"process {proc.pid} ended early (exit {await proc.wait()})")
    return json.loads(line) if line.startswith(b"{") else line.decode().strip()


def _say(proc: asyncio.subprocess.Process, text: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(text.encode() + b"\n")


def role_args(args: argparse.Namespace, transport: str, certs: str) -> list[str]:
    """The arguments every process of a run gets, the bridge and the producers alike."""
    return [
        "--transport", transport, "--certs", certs, "--quic-backend", args.quic_backend, "--gc", args.gc,
        "--producers-quic-backend", producers_backend(args),
        *(["--quiet"] if args.quiet else []),
    ]  # fmt: skip


async def spawn_producers(
    procs: list[asyncio.subprocess.Process], role: str, common: list[str], port: int, n: int, nprocs: int,
    *extra: str, profile_first: bool = False,
) -> None:
    """Producers ``0..n-1`` shared out over ``nprocs`` processes of ``role`` (into ``procs``), all ready."""
    nprocs = max(1, min(nprocs, n))
    share = -(-n // nprocs)
    for k in range(nprocs):
        first, count = k * share, min(share, n - k * share)
        if count > 0:
            procs.append(await _spawn(
                "--role", role, *common, "--port", str(port), "--first", str(first), "--count", str(count),
                *extra, *(["--profile"] if profile_first and k == 0 else []),
            ))  # fmt: skip
    for p in procs:
        assert await _json_line(p, 60) == "ready"


async def start_bridge(
    args: argparse.Namespace, common: list[str]
) -> tuple[tempfile.TemporaryDirectory[str], list[str], asyncio.subprocess.Process]:
    """A bridge on a new log: the log's directory, the bridge's arguments (to restart it) and its process.

    With ``--profile`` a bridge prints its cProfile when stopped (not when killed).
    """
    log_dir = tempfile.TemporaryDirectory(prefix="aqueduct-fleet-log-")
    bridge_args = [
        *common, "--log", log_dir.name, *(["--profile"] if args.profile else []),
        *(["--max-open-streams", str(args.max_open_streams)] if args.max_open_streams else []),
        *(["--max-handshakes", str(args.max_handshakes)] if args.max_handshakes else []),
    ]  # fmt: skip
    return log_dir, bridge_args, await _spawn("--role", "bridge", *bridge_args)


async def kill_left(
    procs: list[asyncio.subprocess.Process], bridge: asyncio.subprocess.Process, log_dir: tempfile.TemporaryDirectory[str]
) -> None:
    """However a run ended: no process of it left running, its log gone."""
    for p in [*procs, bridge]:
        if p.returncode is None:
            p.kill()
            await p.wait()
    log_dir.cleanup()


async def run_one(
    args: argparse.Namespace, transport: str, n: int, certs: str, credential: str = "cookie"
) -> dict[str, Any]:
    """One fleet of ``n`` producers against a fresh bridge; the combined figures."""
    common = role_args(args, transport, certs)
    signer, bridge_extra = [], []
    if credential == "token":
        signer = ["--token-signer", str(Path(certs) / "token.key")]
        bridge_extra = ["--token-key", str(Path(certs) / "token.pub")]
    log_dir, bridge_args, bridge = await start_bridge(args, [*common, *bridge_extra])
    procs: list[asyncio.subprocess.Process] = []
    restart: dict[str, Any] = {}
    try:
        port = (await _json_line(bridge, 60))["port"]
        await spawn_producers(
            procs, "producers", common, port, n, args.procs, "--messages", str(args.messages),
            "--rate", str(args.rate), "--limit", str(args.limit), *signer, profile_first=args.profile,
        )  # fmt: skip
        burst = time.time() + 0.5
        for p in procs:
            _say(p, f"go {burst}")
        if args.restart_after is not None:
            await asyncio.sleep(burst + args.restart_after - time.time())
            bridge, restart = await _restart(bridge, [*bridge_args, "--port", str(port)])
        results = [await _json_line(p, 3 * args.limit + 60) for p in procs]
        if restart:
            for p in procs:
                _say(p, f"reconnected {restart['killed_at']}")
            back = [await _json_line(p, args.limit + 60) for p in procs]
            restart["reconnected_after_restart"] = sum(b["reconnected"] for b in back)
            restart["last_reconnect_s"] = max(b["last_reconnect_s"] for b in back)
            backs = sorted(t for b in back for t in b["back_s"])
            restart["back_s"] = backs[-1] if backs else None
            restart["back_p50_s"] = percentile(backs, 0.5)
            restart["back_without_ack"] = sum(b["back_without_ack"] for b in back)
        _say(bridge, "report")
        report = await _json_line(bridge, 60)
        for p in procs:
            _say(p, "close")
        for p in procs:
            await asyncio.wait_for(p.wait(), 60)
        _say(bridge, f"stop {args.messages}")
        final = await _json_line(bridge, 120)
        await asyncio.wait_for(bridge.wait(), 60)
    finally:
        await kill_left(procs, bridge, log_dir)
    connected = sum(r["connected"] for r in results)
    times = sorted(t for r in results for t in r["connect_s"])
    span = times[-1] if times else 0.0
    return {
        "transport": transport,
        "quic_backend": args.quic_backend if transport == "quic" else None,
        "producers_quic_backend": producers_backend(args) if transport == "quic" else None,
        "credential": credential,
        "producers": n,
        "processes": len(procs),
        "connected": connected,
        "failed": n - connected,
        "acked_producers": sum(r["acked"] for r in results),
        "retries": sum(r["retries"] for r in results),
        "reconnects": sum(r["reconnects"] for r in results),
        "producer_lag_p99_s": max(r["producer_lag_p99_s"] for r in results),
        "why_sessions_ended": sum((Counter(dict(r["why_sessions_ended"])) for r in results), Counter()).most_common(5),
        "stuck_producers": [s for r in results for s in r["stuck"]][:20],
        "handshakes_per_s": connected / span if span else 0.0,
        "connect_p50_s": percentile(times, 0.5),
        "connect_p99_s": percentile(times, 0.99),
        "last_connect_s": span,
        "errors": sorted({e for r in results for e in r["errors"]})[:5],
        "exactly_once": final["exactly_once_bad_count"] == 0 and final["streams"] == n,
        "checked_from": "log (no Spark)",
        **restart,
        **report,
        **final,
    }


async def _restart(
    bridge: asyncio.subprocess.Process, bridge_args: list[str]
) -> tuple[asyncio.subprocess.Process, dict[str, Any]]:
    """SIGKILL the bridge mid-run and start another on its log and port; how long it took."""
    bridge.kill()
    await bridge.wait()
    killed, killed_at = time.perf_counter(), time.time()
    again = await _spawn("--role", "bridge", *bridge_args)
    started = await _json_line(again, 600)
    return again, {
        "restarted": True,
        "restart_streams": started["streams_at_start"],
        "restart_log_open_s": started["log_open_s"],
        **{f"restart_{k}": v for k, v in started.items() if k.startswith("gc_")},
        "restart_listening_s": time.perf_counter() - killed,
        "killed_at": killed_at,
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.fleet",
        description="N producers (one stream each) connect to one bridge in one burst; "
        "reports connected/failed, handshakes/s, bridge loop lag p99, bridge RSS, exactly-once.",
    )
    p.add_argument("--producers", type=int, nargs="+", default=[100, 1000], help="fleet sizes (default 100 1000)")
    p.add_argument("--transports", nargs="+", choices=["quic", "tcp"], default=["quic", "tcp"], help="default both")
    p.add_argument("--messages", type=int, default=20, help="messages per producer (default 20)")
    p.add_argument("--rate", type=float, default=10.0, help="messages per second per producer (default 10)")
    p.add_argument("--procs", type=int, default=4, help="producer processes (default 4)")
    p.add_argument("--limit", type=float, default=300.0, help="seconds a producer may take to connect, and to be acked")
    p.add_argument(
        "--quic-backend", choices=["aioquic", "picoquic"], default="aioquic",
        help="the QUIC stack of the bridge and the producers (picoquic: run under python -m interop.netns)",
    )
    p.add_argument(
        "--producers-quic-backend", choices=["aioquic", "picoquic"],
        help="the producers' QUIC stack, if not --quic-backend's (to tell the bridge's share of a figure from theirs)",
    )
    p.add_argument("--json", action="store_true", help="print every run's figures as JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--profile", action="store_true", help="profile the bridge process and the first producer process (cProfile, top functions on stderr)")
    p.add_argument(
        "--restart-after", type=float, metavar="SECONDS",
        help="SIGKILL the bridge this long after the burst and start another on the same log "
        "and port: the fleet must reconnect and resume, still exactly once",
    )
    # internal: the roles of the processes a run starts
    p.add_argument(
        "--storm", action="store_true",
        help="storm mode (bench.storm): once every producer acks, SIGKILL the bridge and restart it on its "
        "log, --repeat times; the time until every producer acks again, the connected producers' ACK "
        "latency and the bridge's loop lag meanwhile, its handshakes/s, the busy refusals",
    )
    p.add_argument("--repeat", type=int, default=3, help="storms per fleet in storm mode (default 3)")
    p.add_argument("--settle", type=float, default=2.0, help="storm mode: seconds between all acking and a kill")
    p.add_argument(
        "--credentials", nargs="+", choices=["cookie", "token"], default=["cookie"],
        help="how producers are admitted, each fleet run once per choice (default cookie)",
    )
    p.add_argument("--token-key", help=argparse.SUPPRESS)
    p.add_argument("--token-signer", help=argparse.SUPPRESS)
    p.add_argument("--role", choices=["bridge", "producers", "storm-producers"], help=argparse.SUPPRESS)
    p.add_argument("--transport", choices=["quic", "tcp"], help=argparse.SUPPRESS)
    p.add_argument("--certs", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument(
        "--max-open-streams", type=int,
        help="streams whose files the bridge's log keeps open between group commits (default: the log's, 512)",
    )  # fmt: skip
    p.add_argument(
        "--max-handshakes", type=int,
        help="the aioquic bridge's handshakes in progress at once (default: the server's, 64)",
    )  # fmt: skip
    p.add_argument(
        "--gc", choices=["serve", "default"], default="serve",
        help="the bridge's garbage collector: tuned as `aqueduct-bridge serve` tunes it once it listens "
        "(aqueduct.bridge.app.gc_tuning; the default), or the interpreter's defaults (to compare)",
    )  # fmt: skip
    p.add_argument("--log", help=argparse.SUPPRESS)
    p.add_argument("--first", type=int, help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, help=argparse.SUPPRESS)
    return p


def _line(r: dict[str, Any]) -> str:
    return (
        f"{r['transport']:4} {r.get('credential', 'cookie'):6} N={r['producers']:>6}: connected {r['connected']} failed {r['failed']} "
        f"retries {r['retries']} reconnects {r['reconnects']} | {r['handshakes_per_s']:.0f} handshakes/s (last at "
        f"{r['last_connect_s']:.1f} s) | loop lag p99 {r['lag_p99_s'] * 1000:.0f} ms "
        f"max {r['lag_max_s'] * 1000:.0f} ms (producers' p99 {r['producer_lag_p99_s'] * 1000:.0f} ms) | RSS idle {r['rss_idle_mb']:.0f} MB peak "
        f"{r['rss_peak_mb']:.0f} MB, {r['rss_per_session_kb']:.1f} kB/session | "
        f"exactly once: {'yes' if r['exactly_once'] else 'NO'} ({r['records']} records)"
        + (
            f" | restarted: {r['restart_streams']} streams, log opened in "
            f"{r['restart_log_open_s']:.1f} s, listening {r['restart_listening_s']:.1f} s after the kill, "
            f"{r['reconnected_after_restart']} reconnected; every producer acked again {r['back_s'] or 0:.1f} s "
            f"after it (p50 {r['back_p50_s']:.1f} s; {r['back_without_ack']} had no ACK after it), "
            f"everything acked {r['last_reconnect_s']:.1f} s after it"
            if r.get("restarted") else ""
        )
    )


def line_of(r: dict[str, Any]) -> str:
    """A run's figures in one line, a storm's or a burst's."""
    from bench import storm

    return storm.result_line(r) if r.get("mode") == "storm" else _line(r)


def _token_keys(directory: Path) -> None:
    """The operator's key pair of a token run: ``token.key`` signs the producers' tokens, ``token.pub`` the bridge's."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from aqueduct.auth.keys import private_key_pem, public_key_pem

    key = Ed25519PrivateKey.generate()
    (directory / "token.key").write_bytes(private_key_pem(key))
    (directory / "token.pub").write_bytes(public_key_pem(key.public_key()))


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    from aqueduct.runtime.certs import generate_certs
    from bench import storm

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # children inherit it
    out = []
    with tempfile.TemporaryDirectory(prefix="aqueduct-fleet-certs-") as certs:
        generate_certs(certs)
        if "token" in args.credentials:
            _token_keys(Path(certs))
        for transport in args.transports:
            for n in args.producers:
                for credential in args.credentials:
                    if not args.quiet:
                        print(f"fleet: {transport} with {n} producers ({credential}) ...", file=sys.stderr, flush=True)
                    if args.storm:  # its producers use the cookie (build_parser refuses tokens there)
                        r = await storm.run_storms(args, transport, n, certs)
                    else:
                        r = await run_one(args, transport, n, certs, credential)
                    out.append(r)
                    if not args.quiet:
                        print(line_of(r), file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.storm and args.credentials != ["cookie"]:
        parser.error("--storm runs with the cookie only (--credentials cookie)")
    if args.role is not None:
        from bench import storm

        role = {"bridge": bridge_role, "producers": producer_role, "storm-producers": storm.producers_role}[args.role]
        if args.profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.runcall(asyncio.run, role(args))
            print(f"{args.role} profile (top 40 by own time, then by cumulative time):", file=sys.stderr)
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(40)
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumtime").print_stats(40)
            return 0
        asyncio.run(role(args))
        return 0
    results = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for r in results:
            print(line_of(r))
    ok = all(r.get("failed", 0) == 0 and r.get("every_producer_back", True) and r["exactly_once"] for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
