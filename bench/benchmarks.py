"""The benchmark table: what is measured, against which baseline, and the DESIGN.md target."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SMALL = 100
BULK = 64 * 1024
# Senders that never block on their own (datagrams) give the loop a turn this often.
DATAGRAM_YIELD_EVERY = 16


@dataclass(frozen=True)
class Case:
    """One contender: a worker role, and the result field (of ``side``) it is judged on.

    A ``phased`` case measures all its repetitions inside one run (``phases``
    in the result): the Spark cases, whose start-up costs over a minute.
    """

    label: str
    role: str
    metric: str
    params: dict[str, Any] = field(default_factory=dict)
    side: str = "server"
    phased: bool = False


@dataclass(frozen=True)
class Benchmark:
    """Our path, the baseline the target applies to, and further informative comparisons.

    ``target`` is the minimum ratio ours/baseline. Without a baseline the
    verdict comes from the ``verdict`` field of our results (memory: bounded).
    ``extras`` are further fields of our results shown under the row
    (median over repetitions), e.g. latency percentiles.
    """

    name: str
    title: str
    unit: str
    ours: Case
    baseline: Case | None
    target: float | None
    others: tuple[Case, ...] = ()
    extras: tuple[tuple[str, str], ...] = ()
    verdict: str | None = None
    slow: bool = False  # starts Spark: skipped by --quick unless named in --only
    max_repeat: int | None = None  # cap on repetitions (a Spark start per repetition)
    floor: float | None = None  # minimum median of ours, in ``unit`` (a target stated as a rate)

    @property
    def cases(self) -> tuple[Case, ...]:
        """Baselines first, ours last, in the order each repetition runs them."""
        base = () if self.baseline is None else (self.baseline,)
        return (*base, *self.others, self.ours)


RAW_SMALL = Case("raw aioquic, length-prefixed, 1 stream", "raw.small", "msg_per_s", {"size": SMALL})
# The same traffic straight on picoquic (bench.raw_picoquic): the fastest raw
# stack here, beside every path, so each shows how far its own stack's limit is
# from the best one. Its server needs a loopback-only namespace (interop.netns).
PQ = {"backend": "picoquic"}
RAW_PQ_BULK = Case("raw picoquic, 1 unidirectional stream", "rawpq.bulk", "mb_per_s", {"size": BULK})
RAW_PQ_SMALL = Case("raw picoquic, length-prefixed, 1 stream", "rawpq.small", "msg_per_s", {"size": SMALL})
RAW_PQ_DATAGRAM = Case(
    "raw picoquic datagrams", "rawpq.datagram", "msg_per_s", {"size": SMALL, "yield_every": DATAGRAM_YIELD_EVERY}
)
RAW_AQ_DATAGRAM = Case(
    "raw aioquic datagrams", "raw.datagram", "msg_per_s", {"size": SMALL, "yield_every": DATAGRAM_YIELD_EVERY}
)
RAW_AQ_BULK = Case("raw aioquic, 1 unidirectional stream", "raw.bulk", "mb_per_s", {"size": BULK})
# The third raw stack (bench.raw_qh3, the `bench` extra): aioquic's fork with a
# Rust core, beside the aioquic rows so one run shows the three stacks side by side.
RAW_QH3_BULK = Case("raw qh3, 1 unidirectional stream", "rawqh3.bulk", "mb_per_s", {"size": BULK})
RAW_QH3_SMALL = Case("raw qh3, length-prefixed, 1 stream", "rawqh3.small", "msg_per_s", {"size": SMALL})
RAW_QH3_DATAGRAM = Case(
    "raw qh3 datagrams", "rawqh3.datagram", "msg_per_s", {"size": SMALL, "yield_every": DATAGRAM_YIELD_EVERY}
)
# Durability arrives in group commits (a few per second when the disk is slow):
# connector runs need more time than the others for a meaningful rate.
CONNECTOR_PARAMS = {"size": SMALL, "min_seconds": 3.0, "min_warmup": 0.5}
#: A producer tuned for throughput: its records in flight (sent, not yet acked
#: after the group commit) are bounded by its credits and its unacked buffer,
#: so the rate is at most that window over the commit-to-ack latency.
DEEP_WINDOW = {"credits": 32_768, "max_buffer": 100_000}
CONNECTOR_AQ = Case(
    "connector over Aqueduct -> durable log", "connector.aqueduct", "msg_per_s", CONNECTOR_PARAMS
)
SPARK_PARAMS = {
    "size": SMALL,
    "transport": "aqueduct",
    "trigger": 1.0,
    "prime": 100,
    "prime_timeout": 240.0,
    "min_seconds": 8.0,
    "min_warmup": 1.0,
}

BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "ordered_bulk",
        "ORDERED bulk, 64 KiB messages",
        "MB/s",
        ours=Case("aqueduct ORDERED", "ours.ordered", "mb_per_s", {"size": BULK}),
        baseline=RAW_AQ_BULK,
        target=0.90,
        others=(RAW_PQ_BULK, RAW_QH3_BULK),
    ),
    Benchmark(
        "ordered_small",
        "ORDERED 100-byte messages",
        "msg/s",
        ours=Case("aqueduct ORDERED", "ours.ordered", "msg_per_s", {"size": SMALL}),
        baseline=RAW_SMALL,
        target=0.80,
        others=(
            Case(
                "aqueduct ORDERED, send_many of 64 / recv_many", "ours.ordered", "msg_per_s",
                {"size": SMALL, "batch": 64},
            ),
            RAW_PQ_SMALL,
            RAW_QH3_SMALL,
        ),
    ),
    Benchmark(
        "unordered_small",
        "UNORDERED 100-byte messages",
        "msg/s",
        ours=Case("aqueduct UNORDERED", "ours.unordered", "msg_per_s", {"size": SMALL}),
        baseline=Case(
            "raw aioquic, stream per message", "raw.stream_per_message", "msg_per_s", {"size": SMALL}
        ),
        target=None,
    ),
    Benchmark(
        "unreliable_small",
        "UNRELIABLE 100-byte messages (arrived)",
        "msg/s",
        ours=Case(
            "aqueduct UNRELIABLE",
            "ours.unreliable",
            "msg_per_s",
            {"size": SMALL, "yield_every": DATAGRAM_YIELD_EVERY},
        ),
        baseline=RAW_AQ_DATAGRAM,
        target=0.80,
        others=(RAW_PQ_DATAGRAM, RAW_QH3_DATAGRAM),
    ),
    Benchmark(
        "connector_ingest",
        "connector ingest into the durable log, 100-byte records",
        "rec/s",
        ours=CONNECTOR_AQ,
        baseline=RAW_SMALL,
        target=0.70,
        others=(
            Case("same connector frames over plain TCP", "connector.tcp", "msg_per_s", CONNECTOR_PARAMS),
            RAW_PQ_SMALL,
        ),
    ),
    # Both ends on picoquic (issue 19's targets): against raw picoquic, and
    # against raw aioquic for scale. Run under `python -m interop.netns`.
    Benchmark(
        "pq_ordered_bulk",
        "picoquic: ORDERED bulk, 64 KiB messages",
        "MB/s",
        ours=Case("aqueduct ORDERED on picoquic", "ours.ordered", "mb_per_s", {"size": BULK, **PQ}),
        baseline=RAW_PQ_BULK,
        target=0.80,
        others=(RAW_AQ_BULK,),
    ),
    Benchmark(
        "pq_ordered_small",
        "picoquic: ORDERED 100-byte messages",
        "msg/s",
        ours=Case("aqueduct ORDERED on picoquic", "ours.ordered", "msg_per_s", {"size": SMALL, **PQ}),
        baseline=RAW_PQ_SMALL,
        target=None,
        floor=500_000,
        others=(RAW_SMALL,),
    ),
    # The same with the batch API (Sender.send_many, Receiver.recv_many) and a
    # send window as large as picoquic's own stream buffer (4 MiB; Aqueduct's
    # default is 1 MiB).
    Benchmark(
        "pq_ordered_batched",
        "picoquic: ORDERED 100-byte messages, send_many of 64 / recv_many, 4 MiB window",
        "msg/s",
        ours=Case(
            "aqueduct ORDERED on picoquic, send_many / recv_many, 4 MiB window", "ours.ordered", "msg_per_s",
            {"size": SMALL, "batch": 64, "window": 4 << 20, **PQ},
        ),
        baseline=RAW_PQ_SMALL,
        target=None,
        floor=500_000,
        others=(
            Case(
                "the same with the default 1 MiB window", "ours.ordered", "msg_per_s",
                {"size": SMALL, "batch": 64, **PQ},
            ),
        ),
    ),
    Benchmark(
        "pq_unreliable_small",
        "picoquic: UNRELIABLE 100-byte messages (arrived)",
        "msg/s",
        ours=Case(
            "aqueduct UNRELIABLE on picoquic", "ours.unreliable", "msg_per_s",
            {"size": SMALL, "yield_every": DATAGRAM_YIELD_EVERY, **PQ},
        ),
        baseline=RAW_PQ_DATAGRAM,
        target=None,
        floor=400_000,
        others=(RAW_AQ_DATAGRAM,),
    ),
    Benchmark(
        "pq_connector_ingest",
        "picoquic: connector ingest into the durable log, 100-byte records",
        "rec/s",
        ours=Case(
            "connector over Aqueduct on picoquic -> durable log", "connector.aqueduct", "msg_per_s",
            {**CONNECTOR_PARAMS, **PQ},
        ),
        baseline=RAW_PQ_SMALL,
        target=None,
        floor=300_000,
        others=(
            Case(
                "the same, 32,768 credits per session and max_buffer 100,000", "connector.aqueduct", "msg_per_s",
                {**CONNECTOR_PARAMS, **PQ, **DEEP_WINDOW},
            ),
            CONNECTOR_AQ,
        ),
    ),
    Benchmark(
        "pq_connector_batched",
        "picoquic: connector ingest, the producer hands over 64 records per send_many",
        "rec/s",
        ours=Case(
            "send_many of 64, 32,768 credits per session, max_buffer 100,000", "connector.aqueduct", "msg_per_s",
            {**CONNECTOR_PARAMS, **PQ, **DEEP_WINDOW, "batch": 64},
        ),
        baseline=RAW_PQ_SMALL,
        target=None,
        floor=300_000,
        others=(
            Case(
                "the same with the defaults (4,096 credits, max_buffer 10,000)", "connector.aqueduct",
                "msg_per_s", {**CONNECTOR_PARAMS, **PQ, "batch": 64},
            ),
        ),
    ),
    Benchmark(
        "spark_e2e",
        "end to end into Spark (Parquet sink), records acked after the sink commit",
        "rec/s",
        ours=Case(
            "connector -> bridge -> Spark -> sink",
            "bridge.e2e",
            "msg_per_s",
            {**SPARK_PARAMS, "max_buffer": 500_000, "paced_rate": 1000, "warm_seconds": 15.0,
             "min_seconds": 15.0, "min_warmup": 3.0},
            side="client",
            phased=True,
        ),
        baseline=CONNECTOR_AQ,
        target=0.90,
        extras=(
            ("latency p50 ms, saturated", "p50_ms"),
            ("latency p99 ms, saturated", "p99_ms"),
            ("latency p50 ms at 1,000 rec/s", "paced_p50_ms"),
            ("latency p99 ms at 1,000 rec/s", "paced_p99_ms"),
            ("first micro-batch acked after s", "first_batch_s"),
        ),
        slow=True,
        max_repeat=3,
    ),
    Benchmark(
        "bridge_memory",
        "bridge peak RSS, producer faster than Spark (Spark capped at 2,000 records/trigger)",
        "MB",
        ours=Case(
            "bridge process RSS",
            "bridge.memory",
            "bridge_peak_mb",
            {**SPARK_PARAMS, "max_per_trigger": 2000, "max_lag": 20_000, "max_buffer": 10**9,
             "min_seconds": 15.0},
        ),
        baseline=None,
        target=None,
        extras=(
            ("RSS peak, middle third MB", "bridge_middle_peak_mb"),
            ("RSS peak, last third MB", "bridge_last_peak_mb"),
            ("Spark JVM + workers peak MB", "jvm_peak_mb"),
            ("records made durable", "durable_records"),
            ("largest backlog, records", "max_backlog"),
            ("most credits withheld", "max_withheld_credits"),
        ),
        verdict="bounded",
        slow=True,
        max_repeat=1,
    ),
)

BY_NAME = {b.name: b for b in BENCHMARKS}
