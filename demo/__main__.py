"""``python -m demo``: a bridge with local Spark, N producer processes, and a verdict."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from aqueduct.bridge.app.cli import positive_float, positive_int
from demo.run import DemoConfig, run_demo


def parser() -> argparse.ArgumentParser:
    """The demo's argument parser (exposed so tests can check ``--help``)."""
    d = DemoConfig.__dataclass_fields__
    p = argparse.ArgumentParser(
        prog="python -m demo",
        description=(
            "Start a bridge with local Spark in this process and N producer processes "
            "that connect over QUIC on 127.0.0.1, stream the events with live progress, "
            "then check the Parquet output: every message exactly once, no gaps, each "
            "stream in order, no micro-batch holding part of an epoch. Exits 1 if the "
            "check fails."
        ),
    )
    p.add_argument("--producers", type=positive_int, default=d["producers"].default, metavar="N")
    p.add_argument(
        "--events", type=positive_int, default=d["events"].default, metavar="N",
        help="messages per producer (default: %(default)s)",
    )
    p.add_argument(
        "--streams", type=positive_int, default=d["streams"].default, metavar="N",
        help="streams per producer (default: %(default)s)",
    )
    p.add_argument(
        "--epoch", type=positive_int, default=d["epoch"].default, metavar="N",
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
        "--timeout", type=positive_float, default=d["timeout"].default, metavar="SECONDS",
        help="give up if the run takes longer (default: %(default)s)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    args = parser().parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
