"""The running bridge: connector listeners, durable log, Spark query, acks.

:class:`Bridge` owns the lifetimes of the bridge's parts, each in a room
of its own, and the order they start and stop in:

1. the metrics endpoint first (a busy port fails at once, before Spark
   or a log directory: :mod:`.metrics`);
2. the :class:`~aqueduct.bridge.storage.log.DurableLog` (one writer
   process, flock'ed) and the :class:`~aqueduct.bridge.ingest.service.Ingest`
   with its group-commit task, and the consumers'
   :class:`~aqueduct.bridge.ingest.positions.ConsumerPositions`;
3. the log served over Arrow Flight when it must be (:mod:`.served_log`);
4. the connector listeners (:mod:`.listeners`): from here on producers'
   records are durable, and acked once a query (consumer ``default``)
   committed them;
5. unless a :class:`~aqueduct.bridge.app.spark_bridge.SparkBridge` drives it
   from the user's own Spark application, or it is ingest-only (a query
   elsewhere reads the log over the network), Spark's session and its
   commit listener (:mod:`.spark_query`, py4j's callback server kept on a
   low descriptor by :mod:`.callback_server`), then the query, watched;
6. the commit signals (:mod:`.commit_signals`) that turn the queries'
   commits into producer acks and truncation.

``serve`` also follows drain requests (:mod:`.drain`): a draining bridge
turns producers away, keeps serving its consumers, and ends once they
committed everything it holds.

It stops them the other way round: no new connections, no Spark, then the
buffer made durable, then the log released. The log and ingest are only
ever touched on the loop thread; Spark's blocking calls run in threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Coroutine
from dataclasses import asdict
from pathlib import Path
from typing import Any

from aqueduct.bridge.app.callback_server import SpareDescriptor
from aqueduct.bridge.app.commit_signals import CommitSignals
from aqueduct.bridge.app.config import BridgeConfig
from aqueduct.bridge.app.drain import (
    POLL,
    REFUSAL,
    Drain,
    DrainPhase,
    DrainRequested,
    NothingLeft,
    Waiting,
    refused_doc,
    state_doc,
    waiting,
)
from aqueduct.bridge.app.drain_files import clear_leftovers, take_request, write_state
from aqueduct.bridge.app.gc_tuning import tune_for_serving
from aqueduct.bridge.app.listeners import ConnectorListeners
from aqueduct.bridge.app.metrics import MetricsError, MetricsServer, start_metrics
from aqueduct.bridge.app.pipeline import PipelineError
from aqueduct.bridge.app.progress import BridgeProgress
from aqueduct.bridge.app.served_log import ServedLog, serve_log, source_options
from aqueduct.bridge.app.spark_query import SparkQuery, SparkStartTimeout, in_daemon_thread
from aqueduct.bridge.app.tls import BridgeCertificate, bridge_certificate
from aqueduct.bridge.ingest.config import IngestConfig
from aqueduct.bridge.ingest.positions import ConsumerPositions
from aqueduct.bridge.ingest.producer_auth import ProducerAuth
from aqueduct.bridge.ingest.service import Ingest
from aqueduct.bridge.network.flight_server import LogFlightServer
from aqueduct.bridge.storage.consumers import DEFAULT_CONSUMER, position
from aqueduct.bridge.storage.log import DurableLog, LogError
from aqueduct.connector.worker.server import WorkerServer
from aqueduct.logs import fields

#: seconds between two checks of the open sessions' credentials (a revocation or expiry since HELLO ends them)
CREDENTIAL_SWEEP = 2.0

__all__ = ["Bridge", "BridgeConfig", "BridgeProgress", "SparkStartTimeout", "run_forever", "serve"]

logger = logging.getLogger(__name__)


class Bridge:
    """One bridge instance; ``await start()``, then ``await stop()``.

    Pass ``spark`` to reuse an existing SparkSession (tests share one); the
    bridge then leaves it running on stop. ``start(run_query=False)``
    starts everything but Spark: the :class:`~aqueduct.bridge.app.spark_bridge.SparkBridge`
    does that, with the user's queries, through :meth:`attach_spark` and
    :meth:`watch`.
    """

    def __init__(self, config: BridgeConfig, spark: Any = None) -> None:
        self.config = config
        self.spark_query = SparkQuery(config, spark)
        self.signals = CommitSignals()
        self.connectors = ConnectorListeners()
        #: who HELLO admits when not the cookie; its files are read here, so a bad one fails at once
        self.producer_auth = ProducerAuth.from_options(config.token_key, config.acl, config.token_revoked)
        self.log: DurableLog | None = None
        self.ingest: Ingest | None = None
        self.positions: ConsumerPositions | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.failed: str | None = None
        self.stopped = asyncio.Event()
        self.cafile: Path | None = None
        self.metrics: MetricsServer | None = None
        self.served_log: ServedLog | None = None  # how the log is served over Flight, if it is
        self.flight_server: LogFlightServer | None = None  # while it runs
        self.drain = Drain()
        self.drain_finished = asyncio.Event()  # set once a drain found nothing left uncommitted
        self.drain_refusal: str | None = None  # what a bridge that does not drain answers a request with
        self.listening = asyncio.Event()  # set once the listeners accept (Spark may still be starting)

    # ------------------------------------------------------------ lifecycle

    async def start(self, run_query: bool = True) -> None:
        """Open the log, listen for connectors; then start Spark, its commit listener and the query.

        :attr:`listening` is set once the listeners accept, Spark still
        starting: a producer's records are durable from then on, acked
        once the query (consumer ``default``, registered before the
        listeners open) committed a micro-batch holding them.

        With ``run_query=False`` (the :class:`~aqueduct.bridge.app.spark_bridge.SparkBridge`)
        Spark is the caller's: only the log and the listeners start here.
        """
        spare = SpareDescriptor() if run_query else None  # first, while every number is low
        try:
            await self._start_ingest(run_query)
            if spare is not None:
                await self.spark_query.prepare(self.signals.on_spark_commit, spare)
        finally:
            if spare is not None:
                spare.close()
        if run_query:
            await self.spark_query.start_query(self.source_options())
            self._spawn(self._watchdog(), "query-watchdog")
            if self.spark_query.commit_log is not None:
                self._spawn(self.signals.follow_commit_log(self.spark_query.commit_log), "commit-log")

    async def _start_ingest(self, run_query: bool) -> None:
        """The metrics endpoint, the log and its group commit, the consumers, the listeners."""
        c = self.config
        if c.metrics is not None:  # first: a busy port fails at once, before Spark or a log directory
            self.metrics = start_metrics(self, asyncio.get_running_loop(), *c.metrics)
        # Opening recovers every stream (reads, cuts torn writes): off the loop.
        self.log = await asyncio.to_thread(
            DurableLog, c.log_dir, retention_seconds=c.retention or 0.0, segment_bytes=c.segment_bytes
        )
        self.ingest = Ingest(
            self.log,
            IngestConfig(
                max_lag=c.max_lag, credit_budget=c.credit_budget, memory_budget=c.memory_budget,
                session_credits=c.credits,
            ),
        )
        self.positions = ConsumerPositions(c.log_dir, self.ingest, c.max_consumer_lag)
        self.signals.open(self.positions)
        if run_query or c.ingest_only:  # ingest-only: the remote query reads as `default`
            self.positions.register(DEFAULT_CONSUMER, acks=True)
        self.positions.poll()  # acks and truncation for batches committed before a restart
        self._spawn(self.ingest.run(), "group-commit")
        if c.serves_log:
            self.served_log = serve_log(c, self._certificate(), self.signals.flight_commits(asyncio.get_running_loop()))
            self.flight_server = self.served_log.server
        self._spawn(self.signals.safety_net(), "commit-file")
        if self.producer_auth is not None:
            self._spawn(self._end_revoked_sessions(self.producer_auth), "credentials")
        await self._start_listeners()
        self.listening.set()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(self._on_task_done)
        self._tasks.append(task)

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        """A background task died (e.g. fsync failed): stop rather than stall producers."""
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            # a LogError says what and where in one line (LogFailed: a sync failed, fail-stop)
            self.failed = str(exc) if isinstance(exc, LogError) else f"{task.get_name()} failed: {exc!r}"
            logger.error(self.failed)
            self.stopped.set()

    async def stop_accepting(self) -> None:
        """Close the listeners (their sessions end) and make what they sent durable; the log stays open.

        A :class:`~aqueduct.bridge.app.spark_bridge.SparkBridge` does this
        first, so that its queries can finish with all the log will hold
        (:mod:`~aqueduct.bridge.app.query_stop`). :meth:`stop` closes the
        listeners first too, and makes the buffer durable once its own query stopped.
        """
        await self.connectors.close()
        await self._make_durable()

    async def _make_durable(self) -> None:
        """Group-commit what is buffered; a full or failed disk is reported, not raised (producers keep it)."""
        if self.ingest is None:
            return
        try:
            await self.ingest.group_commit()
        except LogError as exc:  # full or failed: producers still hold what is not durable
            logger.warning("stopping without the last records durable: %s", exc)

    async def stop(self) -> None:
        """Stop accepting, stop the query, make the buffer durable, release the log."""
        await self.connectors.close()
        if self.flight_server is not None:
            await asyncio.to_thread(self.flight_server.shutdown)
            self.flight_server = None
        for task in self._tasks:  # first, so the watchdog does not report our own stop
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self.spark_query.stop()
        if self.positions is not None:
            self.positions.poll()
        if self.ingest is not None:
            await self._make_durable()
            await self.ingest.acks_settled()  # an ACK still being recorded needs the log open
        if self.metrics is not None:
            await asyncio.to_thread(self.metrics.close)  # waits for a scrape in progress, which needs the loop
            self.metrics = None
        if self.log is not None:
            await asyncio.to_thread(self.log.close)
            self.log = None
            self.signals.close()
        self.stopped.set()

    async def _watchdog(self) -> None:
        """End the bridge if the query died: acks would stop and producers stall silently."""
        failed = await self.spark_query.ended()
        if failed is not None:
            self.failed = failed
        self.stopped.set()

    async def _end_revoked_sessions(self, auth: ProducerAuth) -> None:
        """Every :data:`CREDENTIAL_SWEEP` seconds, end the sessions whose token expired or was revoked since HELLO."""
        assert self.ingest is not None
        while True:
            await asyncio.sleep(CREDENTIAL_SWEEP)
            await self.ingest.end_sessions(auth.sessions_check())

    # ------------------------------------------------------------ connectors and readers

    def _certificate(self) -> BridgeCertificate:
        """The bridge's TLS certificate (generated on first use if none was given)."""
        certificate = bridge_certificate(self.config)
        self.cafile = certificate.cafile
        return certificate

    async def _start_listeners(self) -> None:
        assert self.ingest is not None
        c = self.config
        certificate = self._certificate() if c.quic is not None or c.tcp_tls else None
        await self.connectors.start(c, self.ingest, certificate, self.producer_auth)

    @property
    def listeners(self) -> list[WorkerServer]:
        """The connector listeners running now."""
        return list(self.connectors.servers)

    @property
    def quic_address(self) -> tuple[str, int] | None:
        return self.connectors.quic_address

    @property
    def tcp_address(self) -> tuple[str, int] | None:
        return self.connectors.tcp_address

    @property
    def wallaroo_address(self) -> tuple[str, int] | None:
        return self.connectors.wallaroo_address

    @property
    def flight_address(self) -> str | None:
        """``HOST:PORT`` executors dial for the log (the listen host, or this host's name for a wildcard)."""
        return self.served_log.address if self.served_log is not None else None

    @property
    def flight_token_file(self) -> Path | None:
        """The file holding the token Flight callers present (None when the log is not served)."""
        return self.served_log.token_file if self.served_log is not None else None

    def source_options(self) -> dict[str, str]:
        """The ``aqueduct`` source options reading this bridge's log: its directory, or over Flight."""
        return source_options(self.config.log_dir, self.served_log, self.cafile)

    # ------------------------------------------------------------ Spark

    def attach_spark(self, spark: Any, loop: asyncio.AbstractEventLoop) -> None:
        """Listen to ``spark``'s queries (call from any thread; ``loop`` is the bridge's)."""
        self.spark_query.attach(spark, loop, self.signals.on_spark_commit)

    def watch(self, query: Any, consumer: str) -> None:
        """Count ``query``'s commits (listener signal) as ``consumer``'s; any thread."""
        self.spark_query.watch(query, consumer)

    @property
    def query(self) -> Any:
        """The query the bridge started (None without one)."""
        return self.spark_query.query

    @property
    def query_started_at(self) -> float | None:
        """Wall time the bridge asked Spark to start its query."""
        return self.spark_query.started_at

    @property
    def jvm_ended(self) -> str | None:
        """How Spark's JVM ended under the bridge, if it did."""
        return self.spark_query.jvm_ended

    async def drained(self, timeout: float) -> None:
        """Wait until Spark committed every complete epoch the log holds.

        A producer may finish before that: after a reconnect, OK's durable
        points release everything already in the log from its buffer, so
        "all acked" on the producer side means "durable here", and the sink
        catches up from the log afterwards.
        """
        assert self.ingest is not None
        deadline = time.monotonic() + timeout
        while self.ingest.lag or self.ingest.buffered:
            if self.failed or time.monotonic() > deadline:
                raise TimeoutError(f"Spark did not catch up with the log within {timeout} s")
            await asyncio.sleep(0.1)

    # ------------------------------------------------------------ draining

    def follow_drain_requests(self, refusal: str | None = None) -> None:
        """Look for an operator's drain request every :data:`~.drain.POLL` seconds (``serve`` does).

        With ``refusal`` (a ``SparkBridge``), each request is answered with it and the bridge serves on.
        """
        self.drain_refusal = refusal
        if clear_leftovers(self.config.log_dir):
            logger.warning("dropped a drain request left from before this start: run aqueduct-bridge drain again",
                           extra=fields(event="drain_request_dropped"))  # fmt: skip
        self._spawn(self._follow_drain(), "drain")

    async def _follow_drain(self) -> None:
        last: Waiting | None = None
        unreadable: str | None = None  # why the request file could not be taken, said once
        while not self.drain_finished.is_set():
            await asyncio.sleep(POLL)
            try:
                request = take_request(self.config.log_dir)
            except OSError as exc:  # a request file this process may not read or remove: say so, serve on
                request = None
                if str(exc) != unreadable:
                    logger.warning("cannot take the drain request: %s", exc, extra=fields(event="drain_request_unreadable"))
                    unreadable = str(exc)
            if request is not None and self.drain_refusal is not None:
                await self._write_drain_state(refused_doc(self.drain, request, self.drain_refusal))
            elif request is not None:
                await self.start_draining(request)
                last = None  # answer the request, even if nothing changed since
            if not self.drain.draining:
                continue
            left = self.left()
            if left.nothing:
                self.drain.apply(NothingLeft())
                self.drain_finished.set()
            elif left != last:
                await self._write_drain_state(state_doc(self.drain, left))
            last = left

    async def report_drain_end(self, why: str) -> None:
        """Say how a drain ended: in the log and, for ``aqueduct-bridge drain --wait``, in the state file.

        Called before :meth:`stop` frees the log's lock, which is what the
        waiting command watches for.
        """
        if self.drain_finished.is_set():
            since = self.drain.since or time.time()
            logger.info(
                "drained: every record this bridge holds is committed by its consumers (%.1f s after the request)",
                time.time() - since, extra=fields(event="drained"),
            )  # fmt: skip
            ended = "drained"
        else:
            ended = f"stopped before the drain finished ({self.failed or why})"
            logger.warning("%s", ended, extra=fields(event="drain_stopped"))
        await self._write_drain_state(state_doc(self.drain, self.left(), ended))

    async def _write_drain_state(self, doc: dict[str, Any]) -> None:
        """Rewrite the drain's state file; a failed write (a full disk) costs ``drain --wait`` news, not the drain."""
        try:
            await asyncio.to_thread(write_state, self.config.log_dir, doc)
        except OSError as exc:
            logger.warning("cannot write the drain's state file: %s", exc)

    async def start_draining(self, request: str) -> None:
        """Take no new producers and send the connected ones elsewhere; the rest of the bridge goes on.

        See :mod:`.drain`: every HELLO gets the busy ERROR, every open
        session RESTART; Flight and the consumers' commits go on.
        """
        assert self.ingest is not None
        first = self.drain.phase is DrainPhase.SERVING
        self.drain.apply(DrainRequested(request))
        if first:
            self.drain.sessions_ended = await self.ingest.turn_away(REFUSAL)
            logger.info(
                "draining: new producers are refused as busy, %d session(s) sent elsewhere; exiting once "
                "the consumers committed everything this bridge holds", self.drain.sessions_ended,
                extra=fields(event="draining", sessions_ended=self.drain.sessions_ended),
            )  # fmt: skip

    def left(self) -> Waiting:
        """What a drain still waits for: records of complete epochs beyond the ack consumers' commits."""
        assert self.ingest is not None and self.positions is not None and self.log is not None
        complete = self.ingest.complete_offsets()
        names = self.log.stream_names()
        consumers = {
            c.name: {
                sid: position(c, self.positions.committed.get(c.name, {}), sid)
                for sid in complete
                if c.reads.selects(sid, names.get(sid, ""))
            }
            for c in self.positions.consumers.values()
            if c.acks and c.dropped is None
        }
        return waiting(complete, self.ingest.committed_offsets(), consumers, self.ingest.writer.settled)

    # ------------------------------------------------------------ reporting

    def progress(self) -> BridgeProgress:
        """Counters and positions right now (cheap; call it on the loop thread)."""
        assert self.ingest is not None and self.log is not None
        counters = self.ingest.counters
        committed = self.ingest.committed_offsets()
        return BridgeProgress(
            sessions=counters.sessions,
            streams=len(self.log.stream_ids()),
            messages=counters.messages,
            durable_records=sum(self.log.durable_end(s) for s in self.log.stream_ids()),
            committed_records=sum(committed.values()),
            lag=self.ingest.lag,
            withheld_credits=counters.withheld_credits,
            batches=self.signals.batches,
            duplicates=counters.duplicates,
            disk_full=self.ingest.disk_full[0] if self.ingest.disk_full else None,
            draining=self.left().line() if self.drain.draining else None,
        )


async def serve(config: BridgeConfig, status_interval: float = 5.0) -> int:
    """Run a bridge until SIGINT/SIGTERM or query failure, saying what it does through :mod:`logging`.

    It says on one line when it listens (Spark still starting) and on one
    when its query runs. The status line comes every ``status_interval``
    seconds while something changed since the last one (an idle bridge
    stays quiet), with its counters as structured fields
    (:mod:`aqueduct.logs`), from the moment it listens.
    """
    bridge = Bridge(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    asked: list[str] = []  # the signal that asked the bridge to stop

    def on_signal(sig: signal.Signals) -> None:
        asked.append(sig.name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    spark = "no Spark (ingest only)" if config.ingest_only else f"starting Spark ({config.master})"
    logger.info("log %s, %s", config.log_dir, spark, extra=fields(event="starting"))
    starting = asyncio.create_task(bridge.start(run_query=not config.ingest_only), name="start")
    listening = asyncio.create_task(bridge.listening.wait())
    await asyncio.wait((starting, listening), return_when=asyncio.FIRST_COMPLETED)
    listening.cancel()
    if bridge.listening.is_set():
        say_listening(bridge)
        bridge.follow_drain_requests()  # (a leftover drain's files gone as the listening line is out)
        tune_for_serving()  # this process is the bridge's own: its start-up heap lives as long as it does
    ends = (stop, bridge.stopped, bridge.drain_finished)
    try:
        await report_until_stopped(bridge, starting, ends, status_interval)
    finally:
        if not starting.done():  # a stop asked for while Spark starts: the start ends first
            logger.info("stopping once Spark's start ended", extra=fields(event="stopping"))
            await asyncio.wait([starting])
    failed = start_failure(starting)
    if failed is not None:  # e.g. another bridge holds the log, the pipeline does not load
        logger.error("%s", failed, extra=fields(event="start_failed"))
        await bridge.stop()
        return 1
    stopped_at = time.monotonic()
    why = asked[0] if asked else "drained" if bridge.drain_finished.is_set() else bridge.jvm_ended or "stopped"
    if bridge.drain.phase is not DrainPhase.SERVING:  # before stop() frees the log: `drain --wait` reads it then
        await bridge.report_drain_end(why)
    await bridge.stop()
    logger.info(
        "%s: stopped in %.1fs, everything acked is durable", why, time.monotonic() - stopped_at,
        extra=fields(event="stopped"),
    )  # fmt: skip
    if not config.ingest_only:
        await wait_for_class_archive(stop)
    if bridge.failed:
        logger.error("%s", bridge.failed, extra=fields(event="failed"))
        return 1
    return 0


async def wait_for_class_archive(stop: asyncio.Event) -> None:
    """Wait for the class archive the JVM of a first start writes as it exits (:mod:`.class_archive`).

    Once per Java and Spark installation, after everything else stopped;
    a second stop signal does not wait for it (a later start writes one).
    """
    from aqueduct.bridge.app.jvm import keep_class_archive

    stop.clear()
    keeping = asyncio.ensure_future(in_daemon_thread(keep_class_archive))
    asked = asyncio.ensure_future(stop.wait())
    await asyncio.wait((keeping, asked), return_when=asyncio.FIRST_COMPLETED)
    asked.cancel()


def say_listening(bridge: Bridge) -> None:
    """One line for where the listeners accept, and one each for the CA file, metrics and Flight."""
    listening = [f"QUIC {bridge.quic_address[0]}:{bridge.quic_address[1]}"] if bridge.quic_address else []
    listening += [f"TCP {bridge.tcp_address[0]}:{bridge.tcp_address[1]}"] if bridge.tcp_address else []
    if bridge.wallaroo_address:
        listening.append(f"Wallaroo v3 TCP {bridge.wallaroo_address[0]}:{bridge.wallaroo_address[1]}")
    logger.info("listening on %s", ", ".join(listening), extra=fields(event="listening", listeners=listening))
    if bridge.cafile is not None:
        logger.info("connectors verify the server with %s", bridge.cafile, extra=fields(event="cafile"))
    if bridge.metrics is not None:
        host, port = bridge.metrics.address
        logger.info("metrics at http://%s:%d/metrics", host, port, extra=fields(event="metrics"))
    if bridge.flight_address is not None:
        logger.info(
            "log served over Flight at %s (token in %s)", bridge.flight_address, bridge.flight_token_file,
            extra=fields(event="flight"),
        )  # fmt: skip


def say_query_running(bridge: Bridge) -> None:
    """One line: the query runs, and how long Spark's session and the query's start took."""
    took = bridge.spark_query.took
    jvm = f"its JVM in {took['jvm']:.1f} s, " if "jvm" in took else ""
    logger.info(
        "query %s running (Spark started %sthe session in %.1f s, the query in %.1f s); acks follow its commits",
        bridge.spark_query.query_name, jvm, took.get("session", 0.0), took.get("query", 0.0),
        extra=fields(event="query_running", **{f"{step}_s": round(s, 2) for step, s in took.items()}),
    )  # fmt: skip


async def report_until_stopped(
    bridge: Bridge, starting: asyncio.Task[None], ends: tuple[asyncio.Event, ...], status_interval: float
) -> None:
    """The status line (when something changed) until one of ``ends`` is set or the start failed."""
    waiters = [asyncio.create_task(e.wait()) for e in ends]
    last: BridgeProgress | None = None
    said_running = False
    try:
        while not any(e.is_set() for e in ends):
            if starting.done() and not said_running:
                if starting.exception() is not None:
                    return
                if bridge.query is not None:
                    say_query_running(bridge)
                said_running = True
            pending = waiters if starting.done() else [*waiters, starting]
            await asyncio.wait(pending, timeout=status_interval, return_when=asyncio.FIRST_COMPLETED)
            if starting.done() and starting.exception() is not None:
                return
            progress = bridge.progress()
            if progress != last or progress.draining:  # a drain that cannot finish keeps saying why
                logger.info(progress.line(), extra=fields(event="status", **asdict(progress)))
                last = progress
    finally:
        for w in waiters:
            w.cancel()


def start_failure(starting: asyncio.Task[None]) -> str | None:
    """Why the bridge's start failed, in one line (None: it did not); an unforeseen error is raised."""
    error = starting.exception()
    if error is None or isinstance(error, (LogError, PipelineError, SparkStartTimeout, MetricsError)):
        return None if error is None else str(error)
    raise error


def run_forever(config: BridgeConfig, status_interval: float = 5.0) -> int:
    """Blocking entry point for ``aqueduct-bridge serve``."""
    return asyncio.run(serve(config, status_interval))
