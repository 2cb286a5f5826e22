"""What a bridge is told: :class:`BridgeConfig`, every option of ``aqueduct-bridge serve``.

Apart from the bridge itself because several places build it (the command
line, :class:`~aqueduct.bridge.app.spark_bridge.SparkBridge`, tests and
benchmarks) and every room of the application reads it; the few answers
derived from several options (does this bridge serve its log? where?)
live here too, so they are decided once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aqueduct.bridge.app.stalled import STALLED_AFTER
from aqueduct.bridge.ingest.config import IngestConfig
from aqueduct.bridge.storage.log import DEFAULT_SEGMENT_BYTES
from aqueduct.connector.worker_session import WorkerConfig


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as a tuple; ``ValueError`` says what form is expected.

    A port alone (``27002``) is the usual slip: the answer names the two
    addresses it most likely meant, rather than only the expected form.
    """
    if text.isdigit():
        raise ValueError(
            f"{text!r} is a port alone: give HOST:PORT, e.g. 0.0.0.0:{text} (every interface) "
            f"or 127.0.0.1:{text} (this machine only)"
        )
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    if int(port) > 65535:
        raise ValueError(f"{text!r}: port must be 0-65535")
    return host.strip("[]"), int(port)


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
    client_cafile: Path | None = None  # mutual TLS: QUIC (and TLS TCP) connectors need a certificate it signed
    tcp_tls: bool = False  # the --tcp listener takes TLS, with the QUIC listener's certificate
    token_key: Path | None = None  # producers are admitted by tokens these public keys signed
    acl: Path | None = None  # what each client certificate's subject may write
    token_revoked: Path | None = None  # revoked token ids and subjects
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
    spark_start_timeout: float = 120.0
    metrics: tuple[str, int] | None = None  # serve Prometheus metrics at http://HOST:PORT/metrics
    stalled_after: float = STALLED_AFTER  # seconds an unacked record waits before its producer counts as stalled
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
