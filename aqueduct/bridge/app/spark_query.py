"""The bridge's Spark side: its session, its query, the listener, and the watch over them.

Everything here talks to the JVM through py4j, and those calls block
(session start ~10 s, ``query.stop``): they run in worker threads, never
on the bridge's event loop, and the start is bounded by
``spark_start_timeout`` (:class:`SparkStartTimeout`). What Spark's commits
then mean for producers is :mod:`aqueduct.bridge.app.commit_signals`'s
business; this room only starts, watches and stops Spark.

The query the bridge starts itself (``readStream.format("aqueduct")``
into a no-code sink or the user's ``--pipeline``, as consumer
``default``) is heard through Spark's commit log in its checkpoint
(:attr:`SparkQuery.commit_log`); the listener (a ``StreamingQueryListener``
in this driver, whose callback runs on a py4j thread) stays for queries
whose checkpoint the bridge cannot read, and for the user's own queries
of a :class:`~aqueduct.bridge.app.spark_bridge.SparkBridge`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from aqueduct.bridge.app.callback_server import SpareDescriptor
from aqueduct.bridge.app.checkpoint import repair_checkpoint
from aqueduct.bridge.app.commit_log import SINK_METADATA, CheckpointCommits
from aqueduct.bridge.app.config import BridgeConfig
from aqueduct.bridge.storage.consumers import DEFAULT_CONSUMER

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: what a commit signal is told: the consumer whose query committed, and its positions per stream
Committed = Callable[[str, dict[int, int]], None]

WATCHDOG_INTERVAL = 2.0  # seconds between checks that the Spark query is alive
JVM_EXIT_WAIT = 5.0  # seconds a stopped query's JVM gets to show whether it is exiting


class SparkStartTimeout(RuntimeError):
    """Spark did not start the bridge's query within ``spark_start_timeout``."""


async def in_daemon_thread(function: Callable[..., T], *args: Any) -> T:
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


def _own_session(c: BridgeConfig) -> Any:
    """The bridge's own SparkSession, on the gateway launched for it."""
    from aqueduct.bridge.app.jvm import quiet_accumulator_server
    from aqueduct.bridge.app.pipeline import local_session

    spark = local_session(c.master, c.spark_log_level, ui_port=c.spark_ui_port)
    quiet_accumulator_server(spark)
    return spark


def on_loop(loop: asyncio.AbstractEventLoop, committed: Committed) -> Committed:
    """``committed`` as Spark's listener thread calls it: run on ``loop``, or dropped once ``loop`` closed.

    Spark's listener bus delivers events on a thread of its own, and may
    deliver the last micro-batch's progress after the bridge stopped and
    closed its loop (removing the listener does not recall an event being
    dispatched): that call raised "Event loop is closed", which Spark
    logged as an ERROR with a Python traceback at the end of a clean stop.
    Dropping it loses nothing: producers keep their records until acked,
    and the next start acks what Spark committed from what it recorded (the
    source's commit files in the log, the checkpoint's commit log:
    :mod:`.commit_log`).
    """

    def on_commit(consumer: str, positions: dict[int, int]) -> None:
        try:
            loop.call_soon_threadsafe(committed, consumer, positions)
        except RuntimeError:
            if not loop.is_closed():
                raise

    return on_commit


class SparkQuery:
    """A Spark session (created here, or the caller's), the bridge's query over the log, and its listener.

    Pass ``spark`` to reuse an existing SparkSession (tests share one, a
    :class:`~aqueduct.bridge.app.spark_bridge.SparkBridge` brings the
    user's); it is then left running on stop.
    """

    def __init__(self, config: BridgeConfig, spark: Any = None) -> None:
        self.config = config
        self.spark = spark
        self._own_spark = spark is None
        self.query: Any = None
        self._listener: Any = None
        #: the query's commit log, when the bridge reads its checkpoint instead of listening
        self.commit_log: CheckpointCommits | None = None
        self.started_at: float | None = None  # wall time the bridge asked Spark to start its query
        self.query_name: str | None = None  # the started query's name
        self._stuck = False  # its start timed out, or its JVM is gone: stopping it could hang
        self.jvm_ended: str | None = None  # how Spark's JVM ended under the bridge, if it did
        self._deadline = 0.0  # loop time by which the session and the query must have started
        #: seconds each start step took: ``jvm`` (the gateway, when launched here), ``session`` (with
        #: the commit listener, the JVM's launch included) and ``query``
        self.took: dict[str, float] = {}

    def attach(self, spark: Any, loop: asyncio.AbstractEventLoop, committed: Committed) -> None:
        """Listen to ``spark``'s queries (call from any thread); ``committed`` is called on ``loop``."""
        from aqueduct.bridge.source import register

        register(spark)
        self._listen(spark, loop, committed)

    def _listen(self, spark: Any, loop: asyncio.AbstractEventLoop, committed: Committed) -> None:
        """Install the commit listener on ``spark`` (the source registered already).

        Imported here: it imports pyspark, which ``serve`` need not load before it listens.
        """
        from aqueduct.bridge.app.commit_listener import install_commit_listener

        self.spark = spark
        self._listener = install_commit_listener(spark, on_loop(loop, committed))

    def watch(self, query: Any, consumer: str) -> None:
        """Count ``query``'s commits (listener signal) as ``consumer``'s; any thread."""
        assert self._listener is not None, "attach_spark first"
        self._listener.watch(str(query.id), consumer)

    # ------------------------------------------------------------ start

    async def prepare(self, committed: Committed, spare: SpareDescriptor) -> None:
        """Create/reuse the session, install the commit listener (py4j's callback server, on ``spare``).

        Starts the clock of ``spark_start_timeout``, which :meth:`start_query` shares.
        """
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + self.config.spark_start_timeout
        await self._step("session", self._prepare, loop, committed, spare)

    async def start_query(self, options: dict[str, str]) -> None:
        """Start the sink or pipeline query over the log (read with ``options``), as consumer ``default``."""
        await self._step("query", self._start_query, options)

    async def _step(self, name: str, step: Callable[..., None], *args: Any) -> None:
        """Run a blocking Spark step in a daemon thread, timed as ``name``; give up loudly at the deadline."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            await asyncio.wait_for(in_daemon_thread(step, *args), max(0.0, self._deadline - loop.time()))
            self.took[name] = loop.time() - began
        except TimeoutError:
            self._stuck = True
            raise SparkStartTimeout(
                f"Spark did not start the query within {self.config.spark_start_timeout:g} s "
                "(--spark-start-timeout); giving up rather than waiting forever"
            ) from None

    def _prepare(self, loop: asyncio.AbstractEventLoop, committed: Committed, spare: SpareDescriptor) -> None:
        from aqueduct.bridge.app.jvm import launch_detached_gateway

        if self.spark is None:
            began = time.monotonic()
            # Before anything here imports pyspark: a launch begun early (serve's) may be importing it
            # in its own thread, and two threads importing pyspark's circular modules at once can fail.
            launch_detached_gateway(self.config.master)  # a process-group SIGTERM must not kill Spark under us
            self.took["jvm"] = time.monotonic() - began
            self.spark = _own_session(self.config)
        from aqueduct.bridge.app.callback_server import start_callback_server
        from aqueduct.bridge.app.static_sources import skip_static_lookup
        from aqueduct.bridge.source import register

        skip_static_lookup(self.spark)  # before the first Python source: Spark would start a worker to look for more
        register(self.spark)
        start_callback_server(self.spark.sparkContext._gateway, spare)  # producers may hold many descriptors by now
        self._listen(self.spark, loop, committed)  # registering again would make Spark warn of a replaced source

    def _start_query(self, options: dict[str, str]) -> None:
        from aqueduct.bridge.app.pipeline import start_pipeline, start_sink

        c = self.config
        repair_checkpoint(c.checkpoint)
        reader = self.spark.readStream.format("aqueduct").options(**options)
        reader = reader.option("consumer", DEFAULT_CONSUMER).option("idleWait", f"{c.idle_wait}s")
        if c.max_records_per_trigger is not None:
            reader = reader.option("maxRecordsPerTrigger", str(c.max_records_per_trigger))
        df = reader.load()
        self.started_at = time.time()
        if c.pipeline is not None:
            self.query, checkpoint = start_pipeline(c.pipeline, df, query_name=c.query_name, checkpoint=c.checkpoint)
        else:
            self.query, checkpoint = start_sink(
                df, c.sink, query_name=c.query_name, checkpoint=c.checkpoint,
                output_dir=c.output_dir, trigger_interval=c.trigger_interval,
            ), c.checkpoint  # fmt: skip
        self.query_name = self.query.name or "(unnamed)"  # a pipeline's own query may have another
        if checkpoint is None:
            self.watch(self.query, DEFAULT_CONSUMER)
        else:
            # Spark's commit log is the earlier signal; the listener would only cost: pyspark
            # converts every progress event field by field over py4j, on this process's core.
            sink_log = c.output_dir / SINK_METADATA if c.pipeline is None and c.sink == "parquet" else None
            self.commit_log = CheckpointCommits(checkpoint, sink=sink_log)
            self.spark.streams.removeListener(self._listener)
            self._listener = None

    # ------------------------------------------------------------ running and stopping

    async def ended(self) -> str | None:
        """Return once the query is no longer active: why, as a failure, or None for a stop signal.

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
                self._stuck = True  # nothing left there to stop
                self.jvm_ended = f"Spark's JVM {how}"
                logger.warning("%s: stopping (everything acked is durable)", self.jvm_ended)
                return None if stopped_by_signal(how) else f"{self.jvm_ended} under the running bridge"
            failed = f"Spark query stopped: {error or 'no error reported'}"
            logger.error(failed)
            return failed

    async def stop(self) -> None:
        """Stop the query, remove the listener, stop the session if the bridge created it."""
        if self.spark is None or self._stuck or (self.query is None and self._listener is None):
            return
        try:
            await asyncio.to_thread(self._stop)
        except Exception as exc:  # noqa: BLE001 - the JVM went away meanwhile: nothing left to stop
            logger.warning("Spark did not stop cleanly (%s)", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    def _stop(self) -> None:
        from aqueduct.bridge.app.jvm import stopping_spark

        stopping_spark()  # the interrupted tasks' traces that follow are the stop's, not failures
        spark = self.spark
        if self.query is not None:
            self.query.stop()
        if self._listener is not None:
            spark.streams.removeListener(self._listener)
            self._listener = None
        if self._own_spark:
            spark.stop()
            self.spark = None
