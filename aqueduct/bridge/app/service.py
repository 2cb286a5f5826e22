"""The running bridge: connector listeners, durable log, Spark query, acks.

:class:`Bridge` wires the parts together and owns their lifetimes:

1. opens the :class:`~aqueduct.bridge.storage.log.DurableLog` (one writer process,
   flock'ed) and the :class:`~aqueduct.bridge.ingest.service.Ingest` sink with its
   group-commit task;
2. listens for connectors over QUIC (Aqueduct) and/or plain TCP; each
   connection's session hands its events to the ingest;
3. unless a :class:`~aqueduct.bridge.app.receiver.SparkBridge` drives it from the
   user's own Spark application, starts Spark (``local[*]`` by default, or
   any master URL whose executors can read the log path) and one query:
   ``readStream.format("aqueduct")`` into a no-code sink or the user's
   ``--pipeline`` (:mod:`aqueduct.bridge.app.pipeline`), as consumer
   ``default``; with ``ingest_only`` no Spark at all: a query elsewhere
   reads the log over the network;
4. feeds "query Q committed the batch ending at these offsets" back to
   :class:`~aqueduct.bridge.ingest.positions.ConsumerPositions`, which has the
   ingest ACK producers (once every ack consumer committed) and truncate
   the log (below what every registered consumer needs). The prompt signal
   for the query the bridge starts is Spark's commit log in its checkpoint
   (:mod:`aqueduct.bridge.app.commit_log`), polled on the loop; for queries
   started elsewhere it is a ``StreamingQueryListener`` in this (driver)
   process, whose callback runs on a py4j thread and only hops onto the
   event loop. The safety
   net is each consumer's commit file, polled: it covers batches committed
   while no listener was watching (before a restart, or in another Spark
   application) and lost callbacks;
5. serves the log over Arrow Flight (:mod:`aqueduct.bridge.network.flight_server`)
   when told to (``flight``), when it is ingest-only, or when its Spark
   master is not local: executors on other hosts then read through it
   (``option("bridge")``), not from the disk.

Spark calls block (session start ~10 s, ``query.stop``), so they run in a
worker thread; the log and ingest are only ever touched on the loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from aqueduct.bridge.app.checkpoint import repair_checkpoint
from aqueduct.bridge.app.commit_listener import install_commit_listener
from aqueduct.bridge.app.commit_log import SINK_METADATA, CheckpointCommits
from aqueduct.bridge.app.metrics import MetricsError, MetricsServer, start_metrics
from aqueduct.bridge.app.pipeline import PipelineError
from aqueduct.bridge.ingest.positions import ConsumerPositions
from aqueduct.bridge.ingest.service import Ingest, IngestConfig
from aqueduct.bridge.network.flight_server import (
    TOKEN_FILE,
    LogFlightServer,
    load_or_create_token,
    start_flight_server,
)
from aqueduct.bridge.storage.consumers import DEFAULT_CONSUMER
from aqueduct.bridge.storage.log import DEFAULT_SEGMENT_BYTES, DurableLog, LogError
from aqueduct.connector.wallaroo.worker_session import WallarooSession
from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct
from aqueduct.connector.worker.server import WorkerServer
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig
from aqueduct.logs import fields
from aqueduct.runtime.certs import cert_paths, generate_certs

logger = logging.getLogger(__name__)

T = TypeVar("T")

SAFETY_NET_INTERVAL = 2.0  # seconds between reads of the consumers' commit files
WATCHDOG_INTERVAL = 2.0  # seconds between checks that the Spark query is alive
JVM_EXIT_WAIT = 5.0  # seconds a stopped query's JVM gets to show whether it is exiting
COMMIT_LOG_POLL = 0.005  # seconds between looks at Spark's commit log while records wait for a commit
COMMIT_LOG_IDLE = 0.05  # seconds between looks at whether records wait at all
TLS_DIR = "tls"  # where generated certificates go inside the log directory


@dataclass
class BridgeConfig:
    """Everything ``aqueduct-bridge serve`` can be told (see ``--help``)."""

    log_dir: Path
    quic: tuple[str, int] | None = None
    tcp: tuple[str, int] | None = None
    wallaroo_tcp: tuple[str, int] | None = None  # Wallaroo v3 connectors (spec/wallaroo-compat.md)
    cookie: bytes = b""
    certfile: Path | None = None
    keyfile: Path | None = None
    client_cafile: Path | None = None  # mutual TLS: QUIC connectors need a certificate it signed
    quic_backend: str = "aioquic"  # QUIC stack of the quic listener (runtime.endpoints.BACKENDS)
    master: str = "local[*]"
    sink: str = "parquet"
    pipeline: str | None = None  # MODULE:FUNCTION building the query from the DataFrame
    output_dir: Path = Path("aqueduct-output")
    checkpoint_dir: Path | None = None
    max_records_per_trigger: int | None = None
    #: seconds between micro-batch starts; 0: the next starts once data is durable and the last committed
    trigger_interval: float = 0.0
    #: seconds a trigger finding no new data waits for some (the source's ``idleWait``)
    idle_wait: float = 0.25
    credits: int = WorkerConfig().initial_credits
    max_lag: int = IngestConfig().max_lag
    credit_budget: int | None = None  # credits all sessions together may hold (None: credits each)
    memory_budget: int | None = None  # bytes of records all sessions may have in flight (see IngestConfig)
    retention: float | None = None
    segment_bytes: int = DEFAULT_SEGMENT_BYTES  # truncation drops whole segments of this size
    max_consumer_lag: int | None = None  # records; a consumer behind more is dropped
    query_name: str = "aqueduct"
    spark_log_level: str = "WARN"  # of a session the bridge creates itself
    #: seconds Spark may take to start the session and the query; beyond, the bridge fails loudly
    spark_start_timeout: float = 600.0
    metrics: tuple[str, int] | None = None  # serve Prometheus metrics at http://HOST:PORT/metrics
    spark_ui_port: int | None = None  # turn the Spark UI of a session the bridge creates on, on this port
    #: listen address of the log's Flight server (None: only when ingest-only or the master is not local)
    flight: tuple[str, int] | None = None
    ingest_only: bool = False  # listeners, log and Flight server; the Spark query runs elsewhere

    @property
    def serves_log(self) -> bool:
        """Does this bridge serve its log over Flight? Executors of a cluster cannot read its disk."""
        return self.flight is not None or self.ingest_only or not self.master.startswith("local")

    @property
    def flight_listen(self) -> tuple[str, int]:
        """Where the Flight server listens: as told, else beside the first listener, any free port."""
        if self.flight is not None:
            return self.flight
        host = next((a[0] for a in (self.quic, self.tcp, self.wallaroo_tcp) if a is not None), "127.0.0.1")
        return host, 0

    @property
    def checkpoint(self) -> Path:
        return self.checkpoint_dir or self.output_dir / "_checkpoint"


@dataclass(frozen=True)
class BridgeProgress:
    """A snapshot for status lines, the demo's display and tests."""

    sessions: int
    streams: int
    messages: int  # data records received and appended
    durable_records: int  # records (boundaries included) made durable
    committed_records: int  # records below Spark's committed offsets
    lag: int  # complete-epoch records Spark has not committed
    withheld_credits: int
    batches: int  # micro-batches whose commit advanced the offsets
    duplicates: int
    disk_full: str | None = None  # why commits wait for space (credits are held meanwhile)

    def line(self) -> str:
        full = f" | LOG DISK FULL, credits held: {self.disk_full}" if self.disk_full else ""
        return (
            f"sessions {self.sessions} | streams {self.streams} | received {self.messages:,} "
            f"| durable {self.durable_records:,} | committed {self.committed_records:,} "
            f"| lag {self.lag:,} | withheld credits {self.withheld_credits:,} "
            f"| batches {self.batches} | duplicates dropped {self.duplicates:,}{full}"
        )


class SparkStartTimeout(RuntimeError):
    """Spark did not start the bridge's query within ``spark_start_timeout``."""


async def _in_daemon_thread(function: Callable[..., T], *args: Any) -> T:
    """Run ``function`` in a daemon thread and await its result.

    Unlike ``asyncio.to_thread`` (the loop's executor, joined at exit), a
    daemon thread stuck in a call into the JVM cannot keep the process
    alive after the bridge gave up on it.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # the caller stopped waiting
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        try:
            result = function(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=run, name="spark-start", daemon=True).start()
    return await future


class Bridge:
    """One bridge instance; ``await start()``, then ``await stop()``.

    Pass ``spark`` to reuse an existing SparkSession (tests share one); the
    bridge then leaves it running on stop. ``start(run_query=False)``
    starts everything but Spark: the :class:`~aqueduct.bridge.app.receiver.SparkBridge`
    does that, with the user's queries, through :meth:`attach_spark` and
    :meth:`watch`.
    """

    def __init__(self, config: BridgeConfig, spark: Any = None) -> None:
        self.config = config
        self._spark = spark
        self._own_spark = spark is None
        self.log: DurableLog | None = None
        self.ingest: Ingest | None = None
        self.positions: ConsumerPositions | None = None
        self.query: Any = None
        self._listener: Any = None
        self._listeners: list[Any] = []  # connector transport servers
        self._tasks: list[asyncio.Task[None]] = []
        self._batches = 0
        self._counted: dict[str, dict[int, int]] = {}  # per consumer, the end of the last batch counted
        self.failed: str | None = None
        self._spark_stuck = False  # its start timed out: stopping it could hang too
        self.jvm_ended: str | None = None  # how Spark's JVM ended under the bridge, if it did
        self.stopped = asyncio.Event()
        self.quic_address: tuple[str, int] | None = None
        self.tcp_address: tuple[str, int] | None = None
        self.wallaroo_address: tuple[str, int] | None = None
        self.cafile: Path | None = None
        self.metrics: MetricsServer | None = None
        self.query_started_at: float | None = None  # wall time the bridge asked Spark to start its query
        self._commit_log: CheckpointCommits | None = None  # the query's commit log, when the bridge set it
        self.flight_server: LogFlightServer | None = None
        #: ``HOST:PORT`` executors dial for the log (the listen host, or this host's name for a wildcard)
        self.flight_address: str | None = None
        self.flight_token_file: Path | None = None

    # ------------------------------------------------------------ lifecycle

    async def start(self, run_query: bool = True) -> None:
        """Open the log, start Spark and its commit listener, listen for connectors, start the query.

        With ``run_query=False`` (the :class:`~aqueduct.bridge.app.receiver.SparkBridge`)
        Spark is the caller's: only the log and the listeners start here.
        """
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
        if run_query or c.ingest_only:  # ingest-only: the remote query reads as `default`
            self.positions.register(DEFAULT_CONSUMER, acks=True)
        self.positions.poll()  # acks and truncation for batches committed before a restart
        self._spawn(self.ingest.run(), "group-commit")
        if c.serves_log:
            self._start_flight()
        if not run_query:
            await self._start_listeners()
        else:
            # Spark's session and the commit listener first, while this process holds few
            # descriptors: py4j's callback server (which the listener starts) waits on its
            # socket with select(), which fails for a descriptor number of 1024 or more; its
            # thread then ends and the query's start hangs forever on a call nobody answers.
            # Producers connecting during Spark's start (each a descriptor, their streams two
            # more) pushed it there; they now retry until the listeners are up.
            deadline = asyncio.get_running_loop().time() + c.spark_start_timeout
            await self._spark_step(self._prepare_spark, deadline)
            await self._start_listeners()
            await self._spark_step(self._start_query, deadline)
            self._spawn(self._watchdog(), "query-watchdog")
            if self._commit_log is not None:
                self._spawn(self._follow_commit_log(self._commit_log), "commit-log")
        self._spawn(self._safety_net(), "commit-file")

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

    async def stop(self) -> None:
        """Stop accepting, stop the query, make the buffer durable, release the log."""
        for server in self._listeners:
            await server.close()
        self._listeners.clear()
        if self.flight_server is not None:
            await asyncio.to_thread(self.flight_server.shutdown)
            self.flight_server = None
        for task in self._tasks:  # first, so the watchdog does not report our own stop
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._spark is not None and not self._spark_stuck and (
            self.query is not None or self._listener is not None
        ):
            try:
                await asyncio.to_thread(self._stop_spark)
            except Exception as exc:  # noqa: BLE001 - the JVM went away meanwhile: nothing left to stop
                logger.warning("Spark did not stop cleanly (%s)", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        if self.positions is not None:
            self.positions.poll()
        if self.ingest is not None:
            try:
                await self.ingest.group_commit()
            except LogError as exc:  # full or failed: producers still hold what is not durable
                logger.warning("stopping without the last records durable: %s", exc)
        if self.metrics is not None:
            await asyncio.to_thread(self.metrics.close)  # waits for a scrape in progress, which needs the loop
            self.metrics = None
        if self.log is not None:
            await asyncio.to_thread(self.log.close)
            self.log = None
        self.stopped.set()

    # ------------------------------------------------------------ connectors

    @property
    def listeners(self) -> list[WorkerServer]:
        """The connector listeners running now."""
        return list(self._listeners)

    def _tls_files(self) -> tuple[Path, Path]:
        c = self.config
        if c.certfile is not None and c.keyfile is not None:
            return c.certfile, c.keyfile
        paths = cert_paths(c.log_dir / TLS_DIR)
        if not paths.server_cert.exists():
            host = c.quic[0] if c.quic else "127.0.0.1"
            names = [_dialled(c.flight_listen[0])] if c.serves_log else []
            hosts = dict.fromkeys(["localhost", "127.0.0.1", host, *names])
            generate_certs(c.log_dir / TLS_DIR, hosts=list(hosts))
        self.cafile = paths.ca
        return paths.server_cert, paths.server_key

    def _start_flight(self) -> None:
        """Serve the log over Flight with the bridge's certificate and its token file."""
        c = self.config
        certfile, keyfile = self._tls_files()
        self.flight_token_file = c.log_dir / TLS_DIR / TOKEN_FILE
        token = load_or_create_token(self.flight_token_file)
        host, port = c.flight_listen
        self.flight_server = start_flight_server(
            c.log_dir, host, port, token=token, certfile=certfile, keyfile=keyfile
        )
        self.flight_address = f"{_dialled(host)}:{self.flight_server.port}"

    def source_options(self) -> dict[str, str]:
        """The ``aqueduct`` source options reading this bridge's log: its directory, or over Flight.

        Only file paths travel in the options; the source reads the token and
        CA from them on the driver (which runs here).
        """
        if self.flight_address is None:
            return {"log": str(self.config.log_dir)}
        assert self.flight_token_file is not None
        options = {"bridge": self.flight_address, "bridgeTokenFile": str(self.flight_token_file)}
        if self.cafile is not None:
            options["bridgeCA"] = str(self.cafile)
        return options

    async def _start_listeners(self) -> None:
        c = self.config
        assert self.ingest is not None
        # Under a shared budget the ingest grants every credit, the first ones included.
        initial = 0 if self.ingest.config.shares_credits else c.credits
        worker = WorkerConfig(cookie=c.cookie, initial_credits=initial)
        if c.quic is not None:
            certfile, keyfile = self._tls_files()
            server = await serve_aqueduct(
                c.quic[0], c.quic[1], self.ingest, worker, certfile=certfile, keyfile=keyfile,
                cafile=c.client_cafile, backend=c.quic_backend,
            )
            self._listeners.append(server)
            self.quic_address = server.address
        if c.tcp is not None:
            server = await serve_tcp(c.tcp[0], c.tcp[1], self.ingest, worker)
            self._listeners.append(server)
            self.tcp_address = server.address
        if c.wallaroo_tcp is not None:
            host, port = c.wallaroo_tcp
            server = await serve_tcp(host, port, self.ingest, worker, WallarooSession)
            self._listeners.append(server)
            self.wallaroo_address = server.address

    # ------------------------------------------------------------ Spark

    def attach_spark(self, spark: Any, loop: asyncio.AbstractEventLoop) -> None:
        """Listen to ``spark``'s queries (call from any thread; ``loop`` is the bridge's)."""
        from aqueduct.bridge.source import register

        register(spark)

        def committed(consumer: str, positions: dict[int, int]) -> None:  # on Spark's listener thread
            loop.call_soon_threadsafe(self._on_spark_commit, consumer, positions)

        self._spark = spark
        self._listener = install_commit_listener(spark, committed)

    def watch(self, query: Any, consumer: str) -> None:
        """Count ``query``'s commits (listener signal) as ``consumer``'s; any thread."""
        assert self._listener is not None, "attach_spark first"
        self._listener.watch(str(query.id), consumer)

    async def _spark_step(self, step: Callable[[asyncio.AbstractEventLoop], None], deadline: float) -> None:
        """Run a blocking Spark step in a daemon thread; give up loudly at ``deadline``."""
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(_in_daemon_thread(step, loop), max(0.0, deadline - loop.time()))
        except TimeoutError:
            self._spark_stuck = True
            raise SparkStartTimeout(
                f"Spark did not start the query within {self.config.spark_start_timeout:g} s "
                "(--spark-start-timeout); giving up rather than waiting forever"
            ) from None

    def _prepare_spark(self, loop: asyncio.AbstractEventLoop) -> None:
        """Create/reuse the session, warm it up, install the commit listener (py4j's callback server)."""
        from aqueduct.bridge.app.jvm import launch_detached_gateway, quiet_accumulator_server
        from aqueduct.bridge.app.pipeline import local_session
        from aqueduct.bridge.app.warmup import warm_up
        from aqueduct.bridge.source import register

        c = self.config
        if self._spark is None:
            launch_detached_gateway()  # a process-group SIGTERM must not kill Spark under us
            self._spark = local_session(c.master, c.spark_log_level, ui_port=c.spark_ui_port)
            quiet_accumulator_server(self._spark)
        register(self._spark)
        # Before the listener exists (it would be handed the warm-up query's progress too).
        took = warm_up(self._spark)
        if took is not None:
            logger.info("Spark warmed up for the first micro-batch in %.1f s", took)
        self.attach_spark(self._spark, loop)

    def _start_query(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the sink or pipeline query over the log, counted as consumer ``default``."""
        from aqueduct.bridge.app.pipeline import start_pipeline, start_sink

        c = self.config
        repair_checkpoint(c.checkpoint)
        reader = self._spark.readStream.format("aqueduct").options(**self.source_options())
        reader = reader.option("consumer", DEFAULT_CONSUMER).option("idleWait", f"{c.idle_wait}s")
        if c.max_records_per_trigger is not None:
            reader = reader.option("maxRecordsPerTrigger", str(c.max_records_per_trigger))
        df = reader.load()
        self.query_started_at = time.time()
        if c.pipeline is not None:
            self.query, checkpoint = start_pipeline(c.pipeline, df, query_name=c.query_name, checkpoint=c.checkpoint)
        else:
            self.query, checkpoint = start_sink(
                df, c.sink, query_name=c.query_name, checkpoint=c.checkpoint,
                output_dir=c.output_dir, trigger_interval=c.trigger_interval,
            ), c.checkpoint  # fmt: skip
        if checkpoint is None:
            self.watch(self.query, DEFAULT_CONSUMER)
        else:
            # Spark's commit log is the earlier signal; the listener would only cost: pyspark
            # converts every progress event field by field over py4j, on this process's core.
            sink_log = c.output_dir / SINK_METADATA if c.pipeline is None and c.sink == "parquet" else None
            self._commit_log = CheckpointCommits(checkpoint, sink=sink_log)
            self._spark.streams.removeListener(self._listener)
            self._listener = None

    def _stop_spark(self) -> None:
        spark = self._spark
        if self.query is not None:
            self.query.stop()
        if self._listener is not None:
            spark.streams.removeListener(self._listener)
            self._listener = None
        if self._own_spark:
            spark.stop()
            self._spark = None

    def _count_batch(self, consumer: str, positions: dict[int, int]) -> None:
        """Count a committed batch once, by whichever signal (sink log, commit log, listener) came first."""
        assert self.positions is not None
        known = self._counted.setdefault(consumer, dict(self.positions.committed.get(consumer, {})))
        if any(pos > known.get(sid, 0) for sid, pos in positions.items()):
            self._batches += 1
            known.update((sid, max(pos, known.get(sid, 0))) for sid, pos in positions.items())

    def _on_spark_commit(self, consumer: str, positions: dict[int, int]) -> None:
        if self.positions is not None and self.log is not None:
            self._count_batch(consumer, positions)
            # Acks, trims the log and records the acked offsets for `status`
            # (the reader's commit file trails by a trigger; acked.json does not).
            self.positions.on_committed(consumer, positions)

    def _on_sink_commit(self, consumer: str, positions: dict[int, int]) -> None:
        """The file sink committed a batch its query has yet to record: acks, no truncation."""
        if self.positions is not None:
            self._count_batch(consumer, positions)
            self.positions.on_sink_committed(consumer, positions)

    async def _follow_commit_log(self, commits: CheckpointCommits) -> None:
        """Ack the moment a batch committed: from the file sink's log, else Spark's commit log.

        Looks every :data:`COMMIT_LOG_POLL` seconds while records wait for
        a commit or a batch acked from the sink's log waits for the commit
        log (one to three ``stat`` calls), not at all while nothing does.
        Such a query has no listener (see :meth:`_start_query`); the commit
        files' safety net still runs.
        """
        assert self.ingest is not None
        while True:
            waiting = self.ingest.lag > 0 or commits.trailing
            await asyncio.sleep(COMMIT_LOG_POLL if waiting else COMMIT_LOG_IDLE)
            if not waiting:
                continue
            if positions := commits.poll():
                self._on_spark_commit(DEFAULT_CONSUMER, positions)
            elif positions := commits.poll_sink():
                self._on_sink_commit(DEFAULT_CONSUMER, positions)

    async def _safety_net(self) -> None:
        while True:
            await asyncio.sleep(SAFETY_NET_INTERVAL)
            assert self.positions is not None
            self.positions.poll()

    async def _watchdog(self) -> None:
        """End the bridge if the query died: acks would stop and producers stall silently.

        A JVM that is gone (its Py4J calls fail) ends the bridge too: with
        one line, and as a stop rather than a failure when a stop signal
        ended it (a service manager signalling every process of the unit).
        """
        from aqueduct.bridge.app.jvm import jvm_exit, stopped_by_signal

        while True:
            await asyncio.sleep(WATCHDOG_INTERVAL)
            try:
                if await asyncio.to_thread(lambda: self.query.isActive):
                    continue
                error = await asyncio.to_thread(self.query.exception)
            except Exception:  # noqa: BLE001 - Py4J's errors: the JVM is gone or going
                error = None
            # A JVM on its way out stops its queries first: give it time to tell how it ended.
            how = await asyncio.to_thread(jvm_exit, JVM_EXIT_WAIT)
            if how is not None:
                self._spark_stuck = True  # nothing left there to stop
                self.jvm_ended = f"Spark's JVM {how}"
                if not stopped_by_signal(how):
                    self.failed = f"{self.jvm_ended} under the running bridge"
                logger.warning("%s: stopping (everything acked is durable)", self.jvm_ended)
            else:
                self.failed = f"Spark query stopped: {error or 'no error reported'}"
                logger.error(self.failed)
            self.stopped.set()
            return

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
            batches=self._batches,
            duplicates=counters.duplicates,
            disk_full=self.ingest.disk_full[0] if self.ingest.disk_full else None,
        )


async def serve(config: BridgeConfig, status_interval: float = 5.0) -> int:
    """Run a bridge until SIGINT/SIGTERM or query failure, saying what it does through :mod:`logging`.

    The status line comes every ``status_interval`` seconds while something
    changed since the last one (an idle bridge stays quiet), with its
    counters as structured fields (:mod:`aqueduct.logs`).
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
    try:
        await bridge.start(run_query=not config.ingest_only)
    except (LogError, PipelineError, SparkStartTimeout, MetricsError) as exc:  # e.g. another bridge holds the log
        logger.error("%s", exc, extra=fields(event="start_failed"))
        await bridge.stop()
        return 1
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
    waiters = [asyncio.create_task(stop.wait()), asyncio.create_task(bridge.stopped.wait())]
    last: BridgeProgress | None = None
    try:
        while not (stop.is_set() or bridge.stopped.is_set()):
            await asyncio.wait(waiters, timeout=status_interval, return_when=asyncio.FIRST_COMPLETED)
            progress = bridge.progress()
            if progress != last:
                logger.info(progress.line(), extra=fields(event="status", **asdict(progress)))
                last = progress
    finally:
        for w in waiters:
            w.cancel()
        started = time.monotonic()
        await bridge.stop()
        why = asked[0] if asked else bridge.jvm_ended or "stopped"
        logger.info(
            "%s: stopped in %.1fs, everything acked is durable", why, time.monotonic() - started,
            extra=fields(event="stopped"),
        )  # fmt: skip
    if bridge.failed:
        logger.error("%s", bridge.failed, extra=fields(event="failed"))
        return 1
    return 0


def _dialled(host: str) -> str:
    """The name clients dial for a listen host: this machine's name for a wildcard address."""
    return socket.getfqdn() if host in ("", "0.0.0.0", "::") else host


def run_forever(config: BridgeConfig, status_interval: float = 5.0) -> int:
    """Blocking entry point for ``aqueduct-bridge serve``."""
    return asyncio.run(serve(config, status_interval))
