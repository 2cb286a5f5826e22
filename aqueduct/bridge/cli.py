"""The ``aqueduct-bridge`` console script: ``serve``, ``status`` and ``demo``.

* ``serve`` runs the bridge: QUIC and/or TCP listeners for connectors, the
  durable log, and the Spark query that reads it, until SIGINT/SIGTERM.
* ``status`` reads a log directory (the bridge may be running) and prints
  each stream's positions, lag and acked point of reference.
* ``demo`` runs a bridge plus simulated producer processes end to end and
  verifies the Parquet output.

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


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _positive_float(text: str) -> float:
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
    p.add_argument("--tcp", type=host_port, metavar="HOST:PORT", help="plain TCP listen address")
    p.add_argument(
        "--wallaroo-tcp", type=host_port, metavar="HOST:PORT",
        help="TCP listen address for Wallaroo's released (v3) connectors",
    )
    p.add_argument("--log", required=True, type=Path, metavar="DIR", help="durable log directory")
    p.add_argument("--cookie", default="", help="shared secret connectors must present")
    p.add_argument("--cert", type=Path, help="TLS certificate (default: generated into --log)")
    p.add_argument("--key", type=Path, help="TLS private key (default: generated into --log)")
    p.add_argument("--master", default=d["master"].default, help="Spark master URL (default: %(default)s)")
    p.add_argument(
        "--sink", choices=("parquet", "console", "memory"), default=d["sink"].default,
        help="Spark sink (default: %(default)s)",
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
        "--max-records-per-trigger", type=_positive_int, metavar="N",
        help="cap on records per micro-batch, spent in whole epochs (default: no cap)",
    )
    p.add_argument(
        "--trigger-interval", type=_positive_float, metavar="SECONDS",
        default=d["trigger_interval"].default, help="micro-batch interval (default: %(default)s)",
    )
    p.add_argument(
        "--credits", type=_positive_int, default=d["credits"].default, metavar="N",
        help="credits per connector session: its un-durable frames in flight (default: %(default)s)",
    )
    p.add_argument(
        "--max-lag", type=_positive_int, default=d["max_lag"].default, metavar="RECORDS",
        help="stop granting credits while this many durable records wait for Spark (default: %(default)s)",
    )
    p.add_argument(
        "--retention", type=_positive_float, metavar="SECONDS",
        help="keep committed log segments this long for reprocessing (default: truncate at once)",
    )
    p.add_argument(
        "--spark-log-level", default=d["spark_log_level"].default,
        choices=["ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"],
        help="log level of the Spark session (default: %(default)s)",
    )
    p.add_argument(
        "--status-interval", type=_positive_float, default=5.0, metavar="SECONDS",
        help="seconds between status lines on stderr (default: %(default)s)",
    )


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
    p.add_argument("--log", required=True, type=Path, metavar="DIR", help="durable log directory")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _add_demo(sub: argparse._SubParsersAction) -> None:
    from aqueduct.bridge.demo import DemoConfig

    d = DemoConfig.__dataclass_fields__
    p = sub.add_parser(
        "demo",
        help="run a bridge with simulated remote producers and verify the output",
        description=(
            "Start a bridge with local Spark in this process and N producer processes "
            "that connect over QUIC on 127.0.0.1, stream the events with live progress, "
            "then check the Parquet output: every message exactly once, no gaps, each "
            "stream in order, no micro-batch holding part of an epoch. Exits 1 if the "
            "check fails."
        ),
    )
    p.add_argument("--producers", type=_positive_int, default=d["producers"].default, metavar="N")
    p.add_argument(
        "--events", type=_positive_int, default=d["events"].default, metavar="N",
        help="messages per producer (default: %(default)s)",
    )
    p.add_argument(
        "--streams", type=_positive_int, default=d["streams"].default, metavar="N",
        help="streams per producer (default: %(default)s)",
    )
    p.add_argument(
        "--epoch", type=_positive_int, default=d["epoch"].default, metavar="N",
        help="messages per epoch: a BOUNDARY follows every N messages (default: %(default)s)",
    )
    p.add_argument(
        "--transport", choices=("quic", "tcp"), default=d["transport"].default,
        help="how producers connect (default: %(default)s)",
    )
    p.add_argument("--master", default=d["master"].default, help="Spark master (default: %(default)s)")
    p.add_argument("--keep", type=Path, metavar="DIR", help="keep log, output and checkpoint in DIR")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument(
        "--timeout", type=_positive_float, default=d["timeout"].default, metavar="SECONDS",
        help="give up if the run takes longer (default: %(default)s)",
    )


def parser() -> argparse.ArgumentParser:
    """The full argument parser (exposed so tests can check ``--help``)."""
    p = argparse.ArgumentParser(
        prog="aqueduct-bridge",
        description="Feed remote producers into Spark Structured Streaming, exactly once.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{serve,status,demo}")
    _add_serve(sub)
    _add_status(sub)
    _add_demo(sub)
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
    config = BridgeConfig(
        log_dir=args.log,
        quic=args.quic,
        tcp=args.tcp,
        wallaroo_tcp=args.wallaroo_tcp,
        cookie=args.cookie.encode(),
        certfile=args.cert,
        keyfile=args.key,
        master=args.master,
        sink=args.sink,
        output_dir=args.output,
        checkpoint_dir=args.checkpoint or args.output / "_checkpoint",
        max_records_per_trigger=args.max_records_per_trigger,
        trigger_interval=args.trigger_interval,
        credits=args.credits,
        max_lag=args.max_lag,
        retention=args.retention,
        spark_log_level=args.spark_log_level,
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


def _demo(args: argparse.Namespace) -> int:
    from aqueduct.bridge.demo import DemoConfig, run_demo

    config = DemoConfig(
        producers=args.producers,
        events=args.events,
        streams=args.streams,
        epoch=args.epoch,
        transport=args.transport,
        master=args.master,
        keep=args.keep,
        timeout=args.timeout,
    )
    return run_demo(config, as_json=args.json)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``aqueduct-bridge``; returns the exit status."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    args = parser().parse_args(argv)
    handlers = {"serve": _serve, "status": _status, "demo": _demo}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
