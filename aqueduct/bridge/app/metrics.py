"""Prometheus metrics of a running bridge, served at ``http://HOST:PORT/metrics``.

``aqueduct-bridge serve --metrics HOST:PORT`` and ``SparkBridge(...,
metrics="HOST:PORT")`` start :func:`start_metrics`. Nothing is counted for
it on the hot paths: a custom collector reads, at scrape time, the counters
the bridge keeps anyway (the ingest's :class:`~aqueduct.bridge.ingest.counters.IngestCounters`,
the log's offsets and index, the consumers' positions, the QUIC listener's
failed handshakes, whether group commits find the disk full), and which
producers wait too long for an ACK is read from those (:mod:`.stalled`).
The bridge's state lives on its event loop, so the scrape (on
``prometheus_client``'s HTTP thread) takes one snapshot there and does the
rest, the log directory's disk usage included, on its own thread.

``prometheus_client`` is the well-kept library for the text format and the
HTTP endpoint (docs/metrics.md lists every series); it is imported only
when metrics are asked for, so the ``metrics`` extra is needed only then.
"""

from __future__ import annotations

import asyncio
import copy
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aqueduct.bridge.app.config import BridgeConfig
from aqueduct.bridge.app.drain import Drain, Waiting
from aqueduct.bridge.app.handshake_metrics import HandshakeCollector
from aqueduct.bridge.app.progress import BridgeProgress
from aqueduct.bridge.app.stalled import stalled_producers
from aqueduct.bridge.ingest.counters import IngestCounters
from aqueduct.bridge.ingest.positions import ConsumerPositions
from aqueduct.bridge.ingest.service import REFUSAL_KINDS, Ingest
from aqueduct.bridge.source.lag import Lag, consumer_lag
from aqueduct.bridge.storage.consumers import position
from aqueduct.bridge.storage.log import DurableLog
from aqueduct.connector.worker.server import WorkerServer

#: Seconds a scrape waits for the bridge's loop (a hang guard: the snapshot is a few dict reads).
SNAPSHOT_TIMEOUT = 10.0
#: Failed QUIC handshakes by kind, as ``refusals_total`` reasons.
HANDSHAKE_REASONS = {"tls": "tls", "other": "quic_handshake"}


class ScrapedBridge(Protocol):
    """What a scrape reads of the running :class:`~aqueduct.bridge.app.service.Bridge`.

    Spelled out here, not imported: the bridge starts the endpoint, so the
    endpoint knows only these parts of it (no import circle between the two).
    """

    config: BridgeConfig
    log: DurableLog | None
    ingest: Ingest | None
    positions: ConsumerPositions | None
    drain: Drain

    @property
    def listeners(self) -> list[WorkerServer]: ...

    def progress(self) -> BridgeProgress: ...

    def left(self) -> Waiting: ...


class MetricsError(RuntimeError):
    """The metrics endpoint could not start (port in use, prometheus_client missing)."""


@dataclass(frozen=True)
class Snapshot:
    """What one scrape reports, copied on the bridge's loop."""

    counters: IngestCounters
    streams: int
    durable_records: int
    acked_records: int
    backlog: int
    buffered: int
    batches: int
    consumers: dict[str, tuple[int, Lag]]  # name -> (records committed, lag)
    failed_handshakes: dict[str, int]
    draining: bool
    drain_waiting: int  # records the drain waits for (0 when not draining)
    disk_full: bool  # group commits, or a new stream's files, find no room on the log's disk
    stalled_producers: int  # connected producers with a record unacked beyond ``stalled_after``


def take_snapshot(bridge: ScrapedBridge) -> Snapshot | None:
    """Copy the bridge's counters (call on its loop); None once it stopped."""
    log, ingest, positions = bridge.log, bridge.ingest, bridge.positions
    if log is None or ingest is None or positions is None:
        return None
    counters = copy.deepcopy(ingest.counters)  # the scrape reads it on another thread
    sids = log.stream_ids()
    streams = {sid: log.snapshot(sid) for sid in sids}
    names = log.stream_names()
    acked = ingest.committed_offsets()
    now = time.time()
    consumers = {}
    for name, consumer in positions.consumers.items():
        if consumer.dropped:
            continue
        committed = positions.committed.get(name, {})
        mine = {sid: s for sid, s in streams.items() if consumer.reads.selects(sid, names[sid])}
        at = {sid: position(consumer, committed, sid) for sid in mine}
        consumers[name] = (sum(at.values()), consumer_lag(mine, at, now))
    failed: dict[str, int] = {}
    for listener in bridge.listeners:
        for kind, n in listener.failed_handshakes().items():
            failed[kind] = failed.get(kind, 0) + n
    return Snapshot(
        counters=counters,
        streams=len(sids),
        durable_records=sum(log.durable_end(s) for s in sids),
        acked_records=sum(acked.values()),
        backlog=ingest.lag,
        buffered=ingest.buffered,
        batches=bridge.progress().batches,
        consumers=consumers,
        failed_handshakes=failed,
        draining=bridge.drain.draining,
        drain_waiting=bridge.left().records if bridge.drain.draining else 0,
        disk_full=ingest.disk_full is not None,
        stalled_producers=stalled_producers(
            streams, {sid: log.connector_of(sid) for sid in sids}, ingest.connected, acked, now,
            bridge.config.stalled_after,
        ),
    )


def disk_bytes(directory: Path) -> int:
    """Bytes the files under ``directory`` take on disk (allocated blocks; files vanishing meanwhile skipped)."""
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:  # truncation removed it meanwhile
                continue
    return total


class BridgeCollector:
    """A ``prometheus_client`` collector over one bridge; see the module docstring."""

    def __init__(self, bridge: ScrapedBridge, loop: asyncio.AbstractEventLoop) -> None:
        self.bridge = bridge
        self.loop = loop

    def describe(self) -> list[Any]:
        return []  # nothing to check at registration (collect needs the running bridge)

    def _snapshot(self) -> Snapshot | None:
        async def take() -> Snapshot | None:
            return take_snapshot(self.bridge)

        if self.loop.is_closed() or not self.loop.is_running():
            return None
        return asyncio.run_coroutine_threadsafe(take(), self.loop).result(SNAPSHOT_TIMEOUT)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        snap = self._snapshot()
        if snap is None:
            return
        c = snap.counters

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"aqueduct_{name}", doc, value=value)

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            return CounterMetricFamily(f"aqueduct_{name}", doc, value=value)

        yield gauge("sessions", "Connector sessions open now.", c.sessions)
        yield counter("sessions_started", "Connector sessions that completed the handshake.", c.sessions_started)
        refusals = CounterMetricFamily(
            "aqueduct_refusals", "Sessions refused or ended by an ERROR, and failed QUIC handshakes, by reason.",
            labels=["reason"],
        )
        for kind in REFUSAL_KINDS:
            refusals.add_metric([kind], c.refusals.get(kind, 0))
        for kind, reason in HANDSHAKE_REASONS.items():
            refusals.add_metric([reason], snap.failed_handshakes.get(kind, 0))
        yield refusals
        yield gauge("streams", "Streams the log holds.", snap.streams)
        yield counter("records_received", "Data records received and appended (duplicates and boundaries excluded).",
                      c.messages)  # fmt: skip
        yield counter("records_duplicate", "Records dropped as already in the log.", c.duplicates)
        yield counter("records_durable", "Records made durable by group commits (log offsets, boundaries included).",
                      snap.durable_records)  # fmt: skip
        yield counter("records_acked", "Records every ack-driving consumer committed: acked to their producers.",
                      snap.acked_records)  # fmt: skip
        yield counter("durable_bytes", "Payload and key bytes made durable by group commits.", c.durable_bytes)
        yield gauge("buffered_records", "Records received but not durable yet.", snap.buffered)
        yield gauge("backlog_records", "Records of complete epochs the ack-driving consumers have not committed.",
                    snap.backlog)  # fmt: skip
        yield counter("credits_granted", "Credits granted to connector sessions (with OK and after group commits).",
                      c.credits_granted)  # fmt: skip
        yield gauge("credits_withheld", "Credits earned but held back while the backlog exceeds --max-lag.",
                    c.withheld_credits)  # fmt: skip
        yield counter("microbatches", "Spark micro-batches whose commit this bridge heard of.", snap.batches)
        h = c.group_commit_seconds
        yield HistogramMetricFamily(
            "aqueduct_group_commit_seconds", "Time of each group commit: writing and fsyncing the group.",
            buckets=h.cumulative(), sum_value=h.total,
        )  # fmt: skip
        committed = CounterMetricFamily("aqueduct_consumer_committed_records",
                                        "Records the consumer's query committed.", labels=["consumer"])  # fmt: skip
        lag = GaugeMetricFamily("aqueduct_consumer_lag_records",
                                "Records of complete epochs the consumer has not committed.", labels=["consumer"])  # fmt: skip
        lag_bytes = GaugeMetricFamily("aqueduct_consumer_lag_bytes", "Stored bytes of those records.",
                                      labels=["consumer"])  # fmt: skip
        age = GaugeMetricFamily(
            "aqueduct_consumer_oldest_unread_age_seconds",
            "Seconds since the oldest record the consumer has not committed became durable (0: none).",
            labels=["consumer"],
        )
        for name, (records, behind) in sorted(snap.consumers.items()):
            committed.add_metric([name], records)
            lag.add_metric([name], behind.records)
            lag_bytes.add_metric([name], behind.bytes)
            age.add_metric([name], behind.oldest_unread_age_s or 0.0)
        yield from (committed, lag, lag_bytes, age)
        yield gauge("draining", "1 while the bridge drains: refuses producers, waits for its consumers to commit.",
                    int(snap.draining))  # fmt: skip
        yield gauge("drain_waiting_records",
                    "Records of complete epochs a draining bridge waits for its ack-driving consumers to commit.",
                    snap.drain_waiting)  # fmt: skip
        yield gauge("log_disk_bytes", "Bytes the log directory takes on disk.", disk_bytes(self.bridge.config.log_dir))
        yield gauge("log_disk_full", "1 while the log's disk is found full (group commits retried, credits held; "
                    "a new stream's producer asked to reconnect), else 0.", int(snap.disk_full))  # fmt: skip
        yield gauge("stalled_producers",
                    "Connected producers with a record durable but unacked for longer than --stalled-after.",
                    snap.stalled_producers)  # fmt: skip


class MetricsServer:
    """The running endpoint; :meth:`close` stops it."""

    def __init__(self, httpd: Any, thread: Any) -> None:
        self._httpd = httpd
        self._thread = thread

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return host, port

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


def start_metrics(bridge: ScrapedBridge, loop: asyncio.AbstractEventLoop, host: str, port: int) -> MetricsServer:
    """Serve the bridge's metrics (and the process's: CPU, memory, descriptors) at ``http://host:port/metrics``."""
    try:
        from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
    except ImportError as exc:
        raise MetricsError(f"metrics need prometheus_client: pip install 'aqueduct[metrics]' ({exc})") from None
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    registry.register(BridgeCollector(bridge, loop))  # type: ignore[arg-type]
    registry.register(HandshakeCollector(bridge))
    try:
        httpd, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise MetricsError(f"metrics endpoint {host}:{port}: {exc.strerror or exc}") from None
    return MetricsServer(httpd, thread)
