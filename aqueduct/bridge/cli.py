"""The ``aqueduct-bridge`` console script: ``serve``, ``status`` and ``consumers``.

* ``serve`` runs the bridge: QUIC and/or TCP listeners for connectors, the
  durable log, and the Spark query that reads it (a no-code ``--sink`` or
  the user's ``--pipeline``), until SIGINT/SIGTERM.
* ``status`` reads a log directory (the bridge may be running) and prints
  each stream's positions, lag and acked point of reference.
* ``consumers list|drop`` shows the queries registered as readers of a log
  and drops one that is gone, so that it stops pinning the log.

Spark's Python workers must run this interpreter (the data source lives in
this package), so ``PYSPARK_PYTHON`` is set to ``sys.executable`` unless the
user already chose one.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path


def host_port(text: str) -> tuple[str, int]:
    """Parse ``HOST:PORT`` (``[v6]:PORT`` too) for argparse, with a clear error."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _add_serve(sub: argparse._SubParsersAction) -> None:
    from aqueduct.bridge.service import BridgeConfig

    d = BridgeConfig.__dataclass_fields__
    p = sub.add_parser(
        "serve",
        help="run the bridge: connector listeners, durable log, Spark query",
        description=(
            "Accept connectors over QUIC (Aqueduct) and/or TCP, make what they send "
            "durable in --log, and stream it into Spark exactly once. Connectors get "
            "their messages acked once the Spark micro-batch holding them is committed "
            "in the sink. Runs until SIGINT/SIGTERM."
        ),
    )
    p.add_argument("--quic", type=host_port, metavar="HOST:PORT", help="QUIC listen address")
    p.add_argument(
        "--quic-backend", choices=("aioquic", "picoquic"), default="aioquic",
        help="QUIC stack of the --quic listener (default aioquic; picoquic needs the picoquic extra and "
        "listens on every interface, so it takes only --quic '[::]:PORT' or 0.0.0.0:PORT)",
    )
    p.add_argument("--tcp", type=host_port, metavar="HOST:PORT", help="plain TCP listen address")
    p.add_argument(
        "--wallaroo-tcp", type=host_port, metavar="HOST:PORT",
        help="TCP listen address for Wallaroo's released (v3) connectors",
    )
    p.add_argument("--log", required=True, type=Path, metavar="DIR", help="durable log directory")
    p.add_argument("--cookie", default="", help="shared secret connectors must present")
    p.add_argument("--cert", type=Path, help="TLS certificate (default: generated into --log)")
    p.add_argument("--key", type=Path, help="TLS private key (default: generated into --log)")
    p.add_argument(
        "--master", default=d["master"].default,
        help="Spark master URL (default: %(default)s); when not local[...], the executors read "
        "the log over Flight (--flight), so they need no access to --log",
    )
    p.add_argument(
        "--flight", type=host_port, metavar="HOST:PORT",
        help="serve the log over Arrow Flight (TLS, token in LOG/tls/flight.token) here; default: "
        "only with --ingest-only or a non-local --master, beside the first listener on a free port",
    )
    p.add_argument(
        "--ingest-only", action="store_true",
        help="no Spark in this process: listeners, log and the Flight server; a query elsewhere "
        "reads it with option('bridge', HOST:PORT) as consumer 'default', whose commits ack producers",
    )
    p.add_argument(
        "--sink", choices=("parquet", "console", "memory"), default=d["sink"].default,
        help="no-code Spark sink of the raw rows (default: %(default)s)",
    )
    p.add_argument(
        "--pipeline", metavar="MODULE:FUNCTION",
        help="your own query instead of --sink: FUNCTION(df) gets the log as a streaming "
        "DataFrame and returns a DataStreamWriter (the bridge names it --query-name, gives it "
        "--checkpoint and starts it) or a StreamingQuery it started; MODULE is imported from "
        "the current directory or PYTHONPATH. Producers are acked after its sink committed",
    )
    p.add_argument(
        "--query-name", default=d["query_name"].default,
        help="name of the bridge's Spark query (default: %(default)s)",
    )
    p.add_argument(
        "--output", type=Path, default=Path("aqueduct-output"), metavar="DIR",
        help="Parquet output directory (default: %(default)s)",
    )
    p.add_argument(
        "--checkpoint", type=Path, metavar="DIR",
        help="Spark checkpoint directory (default: OUTPUT/_checkpoint)",
    )
    p.add_argument(
        "--max-records-per-trigger", type=positive_int, metavar="N",
        help="cap on records per micro-batch, spent in whole epochs (default: no cap)",
    )
    p.add_argument(
        "--trigger-interval", type=positive_float, metavar="SECONDS",
        default=d["trigger_interval"].default, help="micro-batch interval (default: %(default)s)",
    )
    p.add_argument(
        "--credits", type=positive_int, default=d["credits"].default, metavar="N",
        help="credits per connector session: its un-durable frames in flight (default: %(default)s)",
    )
    p.add_argument(
        "--credit-budget", type=positive_int, metavar="N",
        help="credits all connector sessions together may hold, so memory does not grow with "
        "the number of producers; each session then holds up to its fair share, at most "
        "--credits (default: no shared bound, --credits per session)",
    )
    p.add_argument(
        "--memory-budget", type=positive_int, metavar="BYTES",
        help="bytes of records (payload and key) all connector sessions together may have in "
        "flight; turned into a shared credit budget by the mean size of recent records "
        "(with --credit-budget, the smaller applies; default: no byte bound)",
    )
    p.add_argument(
        "--max-lag", type=positive_int, default=d["max_lag"].default, metavar="RECORDS",
        help="stop granting credits while this many durable records wait for Spark (default: %(default)s)",
    )
    p.add_argument(
        "--retention", type=positive_float, metavar="SECONDS",
        help="keep committed log segments this long for reprocessing (default: truncate at once)",
    )
    p.add_argument(
        "--segment-bytes", type=positive_int, metavar="BYTES", default=d["segment_bytes"].default,
        help="size after which a stream starts a new log segment; truncation frees whole "
        "segments (default: %(default)s)",
    )
    p.add_argument(
        "--max-consumer-lag", type=positive_int, metavar="RECORDS",
        help="drop a consumer that does not drive acks once it is this many records behind, "
        "so it cannot pin the log forever; its query then fails with a data-loss error "
        "(default: never)",
    )
    p.add_argument(
        "--spark-log-level", default=d["spark_log_level"].default,
        choices=["ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"],
        help="log level of the Spark session (default: %(default)s)",
    )
    p.add_argument(
        "--spark-start-timeout", type=positive_float, default=d["spark_start_timeout"].default,
        metavar="SECONDS",
        help="fail (exit 1) if Spark has not started the query after this long, instead of "
        "waiting forever (default: %(default)s)",
    )
    p.add_argument(
        "--status-interval", type=positive_float, default=5.0, metavar="SECONDS",
        help="seconds between status lines on stderr (default: %(default)s)",
    )


def _log_and_json(p: argparse.ArgumentParser, json_help: str) -> None:
    """The two options every log-reading command takes."""
    p.add_argument("--log", required=True, type=Path, metavar="DIR", help="durable log directory")
    p.add_argument("--json", action="store_true", help=json_help)


def _add_status(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status",
        help="show streams, positions, lag and acked points of reference of a log",
        description=(
            "Read a bridge's log directory (safe while the bridge runs) and show, per "
            "stream: its connector, log head, the position Spark committed, the lag "
            "between them, and the point of reference acked to the producer."
        ),
    )
    _log_and_json(p, "print JSON instead of a table")


def _add_consumers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "consumers",
        help="list the queries reading a log, or drop one that is gone",
        description=(
            "Every Spark query reading a log is a named consumer (the source's 'consumer' "
            "option). The log is truncated only below what every live consumer committed, "
            "and producers are acked once every consumer marked 'acks' committed."
        ),
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="{list,drop}")
    ls = actions.add_parser("list", help="consumers with their position and lag")
    _log_and_json(ls, "print JSON instead of a table")
    drop = actions.add_parser(
        "drop",
        help="stop a consumer from pinning the log (its query then fails with a data-loss error)",
    )
    drop.add_argument("name", help="the consumer to drop")
    _log_and_json(drop, "print the dropped entry as JSON")


def parser() -> argparse.ArgumentParser:
    """The full argument parser (exposed so tests can check ``--help``)."""
    p = argparse.ArgumentParser(
        prog="aqueduct-bridge",
        description="Feed remote producers into Spark Structured Streaming, exactly once.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{serve,status,consumers}")
    _add_serve(sub)
    _add_status(sub)
    _add_consumers(sub)
    return p


def _serve(args: argparse.Namespace) -> int:
    from aqueduct.bridge.service import BridgeConfig, run_forever

    if args.quic is None and args.tcp is None and args.wallaroo_tcp is None:
        print(
            "aqueduct-bridge serve: give --quic, --tcp and/or --wallaroo-tcp HOST:PORT",
            file=sys.stderr,
        )
        return 2
    if (args.cert is None) != (args.key is None):
        print("aqueduct-bridge serve: --cert and --key go together", file=sys.stderr)
        return 2
    if args.quic is not None:
        from aqueduct.runtime.endpoints import check_backend

        try:
            check_backend(args.quic_backend, serve_on=args.quic[0])
        except ValueError as exc:
            print(f"aqueduct-bridge serve: --quic-backend: {exc}", file=sys.stderr)
            return 2
    if args.pipeline is not None:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the user's module sits here
        from aqueduct.bridge.pipeline import PipelineError, load_pipeline

        try:  # fail before Spark takes ten seconds to start
            load_pipeline(args.pipeline)
        except PipelineError as exc:
            print(f"aqueduct-bridge serve: {exc}", file=sys.stderr)
            return 2
    config = BridgeConfig(
        log_dir=args.log,
        quic=args.quic,
        tcp=args.tcp,
        wallaroo_tcp=args.wallaroo_tcp,
        cookie=args.cookie.encode(),
        certfile=args.cert,
        keyfile=args.key,
        quic_backend=args.quic_backend,
        master=args.master,
        sink=args.sink,
        pipeline=args.pipeline,
        query_name=args.query_name,
        output_dir=args.output,
        checkpoint_dir=args.checkpoint or args.output / "_checkpoint",
        max_records_per_trigger=args.max_records_per_trigger,
        trigger_interval=args.trigger_interval,
        credits=args.credits,
        credit_budget=args.credit_budget,
        memory_budget=args.memory_budget,
        max_lag=args.max_lag,
        retention=args.retention,
        segment_bytes=args.segment_bytes,
        max_consumer_lag=args.max_consumer_lag,
        spark_log_level=args.spark_log_level,
        spark_start_timeout=args.spark_start_timeout,
        flight=args.flight,
        ingest_only=args.ingest_only,
    )
    return run_forever(config, status_interval=args.status_interval)


def _status(args: argparse.Namespace) -> int:
    from aqueduct.bridge.status import format_table, read_status

    try:
        report = read_status(args.log)
    except (FileNotFoundError, ValueError) as exc:
        print(f"aqueduct-bridge status: {exc}", file=sys.stderr)
        return 2
    if args.json:
        import json

        print(json.dumps(report, indent=2))
    else:
        print(format_table(report))
    return 0


def _consumers(args: argparse.Namespace) -> int:
    import json

    from aqueduct.bridge.consumers import ConsumerError, drop_consumer
    from aqueduct.bridge.status import consumer_rows, format_consumers
    from aqueduct.bridge.view import NotALog, check_log_dir

    try:
        check_log_dir(args.log)
        if args.action == "drop":
            dropped = drop_consumer(args.log, args.name, "dropped by `aqueduct-bridge consumers drop`")
            if args.json:
                print(json.dumps({"name": dropped.name, "dropped": dropped.dropped}))
            else:
                print(f"dropped consumer {dropped.name!r}: the log no longer keeps records for it")
            return 0
        rows = consumer_rows(args.log)
    except (NotALog, ConsumerError) as exc:
        print(f"aqueduct-bridge consumers: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(rows, indent=2) if args.json else format_consumers(rows))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``aqueduct-bridge``; returns the exit status."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    args = parser().parse_args(argv)
    handlers = {"serve": _serve, "status": _status, "consumers": _consumers}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
