"""The bridge inside your own Spark driver: :class:`SparkBridge`.

A data engineer keeps their own PySpark application (a script run with
``python`` or ``spark-submit``, or a notebook): their parsing, joins and
sinks. The bridge adds what makes producers worth pointing at it::

    with SparkBridge(spark, log="/data/aq", quic="0.0.0.0:4433") as bridge:
        events = bridge.stream().select(from_json(col("payload").cast("string"), schema).alias("e"))
        q = events.writeStream.foreachBatch(upsert).option("checkpointLocation", ck).start()
        bridge.ack_after(q)
        bridge.await_termination()  # until the query ends, Ctrl-C or SIGTERM

It runs the connector listeners, the durable log and the group commit on
an event loop in a background thread of the driver process (the same
:class:`~aqueduct.bridge.app.service.Bridge` that ``aqueduct-bridge serve``
runs, minus its own query). :meth:`SparkBridge.stream` is the log as a
streaming DataFrame, read as a named consumer; :meth:`SparkBridge.ack_after`
says which queries' commits release producer acks. A producer hears that
a message is safe only after every such query committed the micro-batch
holding it in its sink.

Errors surface in the caller's thread. A configuration mistake is refused
before anything is created, with the words ``aqueduct-bridge serve`` uses
(:mod:`~aqueduct.bridge.app.preflight`, a ``ValueError``): building the
bridge checks its options and files (a certificate that does not match its
key, a log another process writes), starting it its ports, and
:meth:`SparkBridge.stream` its source options (``AqueductOptionError``).
Starting raises what else went wrong; a failure of the
background work later (a disk that stops taking fsyncs) stops the queries
handed to :meth:`~SparkBridge.ack_after`, so :meth:`~SparkBridge.await_termination`
returns, and leaving the ``with`` block raises :class:`SparkBridgeError`. Leaving the
block by any route (Ctrl-C included) stops taking records, makes buffered
records durable, stops those queries between two micro-batches
(:mod:`~aqueduct.bridge.app.query_stop`) and releases the log.

It was called ``Receiver``, the name of the channel half
(``aqueduct.Receiver``) too, in a module named ``receiver``; the old names
and the old module path still import, with a ``DeprecationWarning`` (see
:func:`renamed` and :mod:`aqueduct._moved`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import fields
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from aqueduct.bridge.app.config import BridgeConfig, parse_address
from aqueduct.bridge.app.drain import IN_A_SPARK_JOB
from aqueduct.bridge.app.jvm import quiet_stop
from aqueduct.bridge.app.preflight import (
    PreflightError,
    check_files,
    check_options,
    check_ports,
    keyword,
)
from aqueduct.bridge.app.progress import BridgeProgress
from aqueduct.bridge.app.query_stop import STOP_GRACE, stop_between_batches, stop_requests
from aqueduct.bridge.app.service import Bridge
from aqueduct.bridge.source.options import SourceOptions
from aqueduct.bridge.storage.consumers import DEFAULT_CONSUMER, StreamSelection, check_consumer_name

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds a call into the background loop may take before it is reported
#: as hung (opening a log of many streams is the slowest; a hang guard only).
CALL_TIMEOUT = 300.0

STARTING = ("earliest", "latest")

#: Seconds between looks at the queries in :meth:`SparkBridge.await_termination`:
#: how soon a signal is acted on.
POLL = 0.5


class SparkBridgeError(RuntimeError):
    """The bridge's background work failed, or it was used the wrong way."""


def _address(value: str | tuple[str, int] | None, field: str) -> tuple[str, int] | None:
    """``"HOST:PORT"`` (``[v6]:PORT`` too) or ``(host, port)`` to a tuple, with the command line's error."""
    if value is None or isinstance(value, tuple):
        return value
    try:
        return parse_address(str(value))
    except ValueError as exc:
        raise PreflightError(f"SparkBridge: {keyword(field)} {exc}") from None


def _positive_seconds(value: Any, field: str) -> float:
    """A number of seconds above 0 (not NaN or infinite), as ``serve``'s option of ``field`` takes it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise PreflightError(f"SparkBridge: {keyword(field)} must be a positive number of seconds, got {value!r}")
    return float(value)


def _workers_run_this_interpreter(spark: Any) -> None:
    """Spark's Python workers import this package: unless the user chose their Python, they run this one.

    As ``aqueduct-bridge serve`` does with ``PYSPARK_PYTHON``. The user's
    session already exists, and read that variable when it started
    (``SparkContext.pythonExec``, ``python3`` when unset: often another
    Python, whose workers then fail with ``PYTHON_VERSION_MISMATCH``); the
    source registered next, and the Python functions the user defines
    after, take theirs from there, so it is set too. A Spark Connect
    session's workers are the server's: nothing to set here.
    """
    if "PYSPARK_PYTHON" in os.environ:
        return
    os.environ["PYSPARK_PYTHON"] = sys.executable
    try:
        context = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        return
    if context.pythonExec == "python3":  # the default: nobody chose
        context.pythonExec = sys.executable


def _master(spark: Any) -> str:
    """The session's master URL: a cluster's executors read the log over Flight, not from disk."""
    try:
        return str(spark.conf.get("spark.master", "local[*]"))
    except Exception:  # noqa: BLE001 - a Spark Connect session may not expose it: assume remote
        return "remote"


class SparkBridge:
    """Connector listeners and the durable log in this driver, acking after your queries.

    Keyword arguments are those of ``aqueduct-bridge serve`` that concern
    receiving (see :class:`~aqueduct.bridge.app.config.BridgeConfig`):
    ``quic``, ``tcp`` and ``wallaroo_tcp`` listen addresses (at least one),
    ``cookie``, ``certfile``/``keyfile`` (generated into the log directory
    when not given), ``client_cafile`` (mutual TLS: QUIC connectors must
    present a certificate this CA signed), ``tcp_tls`` (the ``tcp``
    listener takes TLS), ``token_key``, ``acl`` and ``token_revoked``
    (producers admitted by signed tokens and ACL-listed certificates, the
    files re-read when they change; a file that cannot be used is refused
    here, naming the keyword: ``SparkBridge: token_key: cannot read …``),
    ``quic_backend``, ``credits``, ``credit_budget``, ``memory_budget``, ``max_lag``,
    ``retention``, ``segment_bytes`` and ``max_consumer_lag``; ``flight``
    (``HOST:PORT``) serves the log over Arrow Flight there, which happens
    anyway (beside the first listener, any free port) when the session's
    master is not local: :meth:`stream` then reads through it, so the
    executors of a cluster need no access to the log directory; and
    ``metrics="HOST:PORT"`` to serve Prometheus metrics at
    ``http://HOST:PORT/metrics`` (docs/metrics.md), with ``stalled_after``
    (seconds, ``--stalled-after``) saying when a producer waiting for its
    ACK counts as stalled there.
    """

    def __init__(
        self,
        spark: Any,
        log: str | Path,
        *,
        quic: str | tuple[str, int] | None = None,
        tcp: str | tuple[str, int] | None = None,
        wallaroo_tcp: str | tuple[str, int] | None = None,
        cookie: str | bytes = b"",
        metrics: str | tuple[str, int] | None = None,
        **settings: Any,
    ) -> None:
        allowed = {
            "certfile", "keyfile", "client_cafile", "quic_backend", "credits", "credit_budget", "memory_budget", "max_lag", "retention",
            "segment_bytes", "max_consumer_lag", "flight", "tcp_tls", "token_key", "acl", "token_revoked",
            "stalled_after",
        }  # fmt: skip
        unknown = sorted(set(settings) - allowed)
        if unknown:
            raise TypeError(f"SparkBridge got unknown setting(s) {unknown}; known: {sorted(allowed)}")
        listeners = {
            "quic": _address(quic, "quic"),
            "tcp": _address(tcp, "tcp"),
            "wallaroo_tcp": _address(wallaroo_tcp, "wallaroo_tcp"),
        }
        assert {f.name for f in fields(BridgeConfig)} >= allowed
        if "flight" in settings:
            settings["flight"] = _address(settings["flight"], "flight")
        if "stalled_after" in settings:
            settings["stalled_after"] = _positive_seconds(settings["stalled_after"], "stalled_after")
        for name in ("certfile", "keyfile", "client_cafile", "token_key", "acl", "token_revoked"):
            if settings.get(name) is not None:
                settings[name] = Path(settings[name])
        self.spark = spark
        self.config = BridgeConfig(
            log_dir=Path(log),
            cookie=cookie.encode() if isinstance(cookie, str) else cookie,
            metrics=_address(metrics, "metrics"),
            master=_master(spark),
            **listeners,
            **settings,
        )
        try:  # what `serve` refuses, refused here in the same words, before anything is created
            check_options(self.config, keyword)
            check_files(self.config, keyword)
        except PreflightError as exc:
            raise PreflightError(f"SparkBridge: {exc}") from None
        _workers_run_this_interpreter(spark)
        self._bridge = Bridge(self.config, spark=spark)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._consumers: set[str] = set()  # consumers this bridge handed a stream to
        self._queries: list[Any] = []  # queries handed to ack_after
        self._failure_watch: concurrent.futures.Future[None] | None = None

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> SparkBridge:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        if exc is None and self.failed:
            raise SparkBridgeError(self.failed)

    def start(self) -> None:
        """Open the log and listen for connectors; raises here if either fails."""
        if self._loop is not None:
            raise SparkBridgeError("SparkBridge already started")
        try:  # now, not at construction: a port is free or busy when the bridge binds it
            check_ports(self.config, keyword)
        except PreflightError as exc:
            raise PreflightError(f"SparkBridge: {exc}") from None
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="aqueduct-spark-bridge", daemon=True)
        self._thread.start()
        try:
            self._bridge.attach_spark(self.spark, loop)
            self._call(self._bridge.start(run_query=False))
            self._on_loop(lambda: self._bridge.follow_drain_requests(refusal=IN_A_SPARK_JOB))
        except BaseException:
            self.stop()
            raise
        self._failure_watch = asyncio.run_coroutine_threadsafe(self._stop_queries_on_failure(), loop)

    def stop(self) -> None:
        """Stop taking records, stop the queries handed to :meth:`ack_after` between micro-batches, release the log.

        Each query gets up to :data:`~aqueduct.bridge.app.query_stop.STOP_GRACE`
        seconds to finish its micro-batch in progress (a second Ctrl-C cuts
        that short); one still inside a batch then is stopped there.
        """
        loop = self._loop
        if loop is None:
            return
        try:
            with quiet_stop(self.spark), stop_requests() as hurry:  # the JVM's output is the user's
                # Nothing new arrives, so each query finishes its micro-batch and is stopped
                # between two (query_stop): nothing it prints then, nothing left to filter.
                try:
                    self._call(self._bridge.stop_accepting())
                finally:  # the queries are stopped whatever happened to the listeners
                    deadline = time.monotonic() + STOP_GRACE
                    for query in self._queries:
                        stop_between_batches(query, deadline, hurry)
                if self._failure_watch is not None:
                    self._failure_watch.cancel()
                self._call(self._bridge.stop())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            assert self._thread is not None
            self._thread.join(CALL_TIMEOUT)
            loop.close()
            self._loop = None

    @property
    def failed(self) -> str | None:
        """Why the background work stopped, or None while it runs."""
        return self._bridge.failed

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(CALL_TIMEOUT)

    def _on_loop(self, function: Callable[[], T]) -> T:
        async def run() -> T:
            return function()

        return self._call(run())

    def _stop_queries(self) -> None:
        for query in self._queries:
            if query.isActive:
                query.stop()

    async def _stop_queries_on_failure(self) -> None:
        await self._bridge.stopped.wait()
        if self._bridge.failed:
            logger.error("aqueduct bridge failed: %s; stopping its queries", self._bridge.failed)
            await asyncio.to_thread(self._stop_queries)

    # ------------------------------------------------------------ queries

    def stream(self, consumer: str = DEFAULT_CONSUMER, *, starting: str = "earliest", **options: str) -> Any:
        """The log as a streaming DataFrame, read as the consumer named ``consumer``.

        ``starting`` says where a consumer new to this log begins:
        ``"earliest"`` (every record still retained) or ``"latest"`` (the
        end of the last complete epoch). A consumer the log already knows
        resumes from its query's checkpoint instead. ``options`` go to the
        ``aqueduct`` source (e.g. ``maxRecordsPerTrigger``, ``streamPattern``).
        """
        check_consumer_name(consumer)
        if starting not in STARTING:
            raise ValueError(f"SparkBridge.stream: starting must be one of {STARTING}, got {starting!r}")
        if consumer in self._consumers:
            raise SparkBridgeError(
                f"consumer {consumer!r} already has a stream in this bridge; every query "
                "needs a consumer name of its own (stream(consumer='...'))"
            )
        if self._loop is None:
            raise SparkBridgeError("SparkBridge.stream: start the bridge first (use it in a with block)")
        positions = self._bridge.positions
        assert positions is not None
        lowered = {k.lower(): v for k, v in options.items()}
        # Checked here, on the driver, as the source will check them: a mistake is this one
        # AqueductOptionError, not an AnalysisException wrapping it at the bottom of forty lines.
        reader_options = self._reader_options(consumer, starting, options)
        SourceOptions.parse(reader_options)
        reads = StreamSelection.parse(lowered.get("streams"), lowered.get("streampattern"))
        latest = starting == "latest"
        self._on_loop(lambda: positions.register(consumer, acks=False, latest=latest, reads=reads))
        self._consumers.add(consumer)
        return self.spark.readStream.format("aqueduct").options(**reader_options).load()

    def _reader_options(self, consumer: str, starting: str, options: dict[str, str]) -> dict[str, str]:
        """The source options of :meth:`stream`, later ones winning regardless of case (as in Spark's map)."""
        given = {**self._bridge.source_options(), "consumer": consumer}
        given |= {"startingOffsets": "latest"} if starting == "latest" else {}
        merged: dict[str, tuple[str, str]] = {}  # lower-cased name -> (as spelled, value)
        for key, value in (given | options).items():
            merged[key.lower()] = key, value
        return dict(merged.values())

    def ack_after(self, query: Any, consumer: str | None = None) -> None:
        """Ack producers only once ``query`` committed their records, as ``consumer``.

        ``consumer`` may be left out when this bridge handed out exactly
        one stream. Several queries may drive acks; a record is acked
        once all of them committed it.
        """
        if consumer is None:
            if len(self._consumers) != 1:
                raise SparkBridgeError(
                    "SparkBridge.ack_after: name the consumer the query reads "
                    f"(ack_after(query, consumer=...)); this bridge has {sorted(self._consumers)}"
                )
            (consumer,) = self._consumers
        elif consumer not in self._consumers:
            raise SparkBridgeError(
                f"SparkBridge.ack_after: no stream of consumer {consumer!r} was made by this "
                f"bridge (it has {sorted(self._consumers)})"
            )
        positions = self._bridge.positions
        assert positions is not None
        self._on_loop(lambda: positions.register(consumer, acks=True))
        self._bridge.watch(query, consumer)
        self._queries.append(query)

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait until an :meth:`ack_after` query ends, SIGINT or SIGTERM arrives, or ``timeout``.

        Returns True when a query ended (raising its error if it failed,
        as ``awaitTermination`` does), False on a signal or the timeout;
        leaving the ``with`` block then stops cleanly.

        Why not ``query.awaitTermination()`` with Ctrl-C: the
        ``KeyboardInterrupt`` lands inside the py4j call, the driver's
        connection to the JVM is left mid-answer, and the clean stop that
        follows can no longer talk to Spark. Here, called from the main
        thread, a signal only sets a flag (:func:`~aqueduct.bridge.app.query_stop.stop_requests`),
        and the queries are asked in short py4j calls that always finish.
        The previous handlers are restored on return.
        """
        if not self._queries:
            raise SparkBridgeError("SparkBridge.await_termination: hand a query to ack_after first")
        deadline = None if timeout is None else time.monotonic() + timeout
        with stop_requests() as signalled:
            while True:
                for query in self._queries:
                    if not query.isActive:
                        error = query.exception()
                        if error is not None:
                            raise error
                        return True
                left = POLL if deadline is None else min(POLL, deadline - time.monotonic())
                if signalled.is_set() or left <= 0:
                    return False
                # py4j takes whole milliseconds, and Spark refuses 0 ("Timeout has to be positive")
                self._queries[0].awaitTermination(max(left, 0.001))

    # ------------------------------------------------------------ reporting

    @property
    def quic_address(self) -> tuple[str, int] | None:
        return self._bridge.quic_address

    @property
    def tcp_address(self) -> tuple[str, int] | None:
        return self._bridge.tcp_address

    @property
    def wallaroo_address(self) -> tuple[str, int] | None:
        return self._bridge.wallaroo_address

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """Where ``/metrics`` is served (None without ``metrics=``)."""
        return self._bridge.metrics.address if self._bridge.metrics is not None else None

    @property
    def flight_address(self) -> str | None:
        """``HOST:PORT`` of the log's Flight server, or None when the log is read from disk."""
        return self._bridge.flight_address

    @property
    def cafile(self) -> Path | None:
        """The CA certificate QUIC connectors verify the bridge with (when generated)."""
        return self._bridge.cafile

    def progress(self) -> BridgeProgress:
        """Counters and positions right now (sessions, records, lag, batches)."""
        return self._on_loop(self._bridge.progress)


#: The old names of this module's classes: importable still, each warning once.
RENAMED = {"Receiver": "SparkBridge", "ReceiverError": "SparkBridgeError"}
_warned: set[str] = set()


def renamed(name: str) -> Any:
    """The class an old name stands for; the first use of each name warns (``DeprecationWarning``).

    Called from a module's ``__getattr__`` (here and in :mod:`aqueduct.bridge`),
    so the warning points at the line that imported the old name.
    """
    if name not in _warned:
        _warned.add(name)
        warnings.warn(
            f"aqueduct.bridge.{name} is renamed {RENAMED[name]} (aqueduct.Receiver is the channel half); "
            f"import {RENAMED[name]} instead",
            DeprecationWarning,
            stacklevel=3,
        )
    return globals()[RENAMED[name]]


def __getattr__(name: str) -> Any:
    if name in RENAMED:
        return renamed(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
