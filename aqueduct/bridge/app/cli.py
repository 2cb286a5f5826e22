"""The ``aqueduct-bridge`` console script: ``serve``, ``status``, ``consumers`` and ``drain``.

* ``serve`` runs the bridge: QUIC and/or TCP listeners for connectors, the
  durable log, and the Spark query that reads it (a no-code ``--sink`` or
  the user's ``--pipeline``), until SIGINT/SIGTERM.
* ``status`` reads a log directory (the bridge may be running) and prints
  each stream's positions, lag and acked point of reference.
* ``consumers list|drop`` shows the queries registered as readers of a log
  and drops one that is gone, so that it stops pinning the log.
* ``drain`` asks the bridge running on a log to take no new producers, send
  its own elsewhere and exit once its consumers committed everything it
  holds (:mod:`.drain`); it waits for that and shows what is left.

Spark's Python workers must run this interpreter (the data source lives in
this package), so ``PYSPARK_PYTHON`` is set to ``sys.executable`` unless the
user already chose one.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from aqueduct.bridge.app.config import BridgeConfig, parse_address
from aqueduct.console import (
    COOKIE_ENV,
    UsageError,
    add_secret_options,
    add_version,
    non_negative_float,
    positive_float,
    positive_int,
    read_secret,
    run,
)

#: the distribution's name on PyPI (the import name is ``aqueduct``), for install hints
DISTRIBUTION = "aqueduct-quic"
#: top-level modules of the ``spark`` extra, which the bridge imports
SPARK_EXTRA = {"pyspark", "pandas", "py4j"}
#: the master URLs Spark takes (local[N,F] retries failed tasks F times; local-cluster is for tests)
SPARK_MASTER = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[.+\]|spark://.+|yarn|k8s://.+")


def host_port(text: str) -> tuple[str, int]:
    """argparse type: ``HOST:PORT`` (``[v6]:PORT`` too), with a clear error (a port alone says what it lacks)."""
    try:
        return parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def port_number(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}")
    return int(text)


#: ``serve``'s options, in the groups ``--help`` shows: ``"--flag METAVAR": (kind, help)``. A kind is
#: an argparse type, a tuple of choices, ``bool`` for a switch or ``str``; the default is
#: :class:`BridgeConfig`'s (or :data:`_SERVE_DEFAULTS`'), and the help says it.
_SERVE_OPTIONS: dict[str, dict[str, tuple[Any, str]]] = {
    "connector listeners": {
        "--quic HOST:PORT": (host_port, "QUIC listen address (UDP)"),
        "--quic-backend": (("aioquic", "picoquic"),
                           "QUIC stack of the --quic listener; picoquic needs the picoquic extra and listens on "
                           "every interface, so it takes only --quic '[::]:PORT' or 0.0.0.0:PORT"),
        "--tcp HOST:PORT": (host_port, "TCP listen address (plaintext unless --tcp-tls)"),
        "--tcp-tls": (bool, "the --tcp listener takes TLS (producers dial tcps://), with the certificate of "
                            "--cert/--key (or the generated one) and, with --client-ca, client certificates"),
        "--wallaroo-tcp HOST:PORT": (host_port, "TCP listen address for Wallaroo's released (v3) connectors"),
    },
    "TLS and who may write": {
        "--cert PEM": (Path, "TLS certificate, full chain, leaf first (default: generated into --log)"),
        "--key PEM": (Path, "its unencrypted private key (default: generated into --log)"),
        "--client-ca PEM": (Path, "mutual TLS: admit only connectors presenting a certificate signed by this CA "
                                  "(QUIC with the aioquic backend, and --tcp with --tcp-tls; refused beside a "
                                  "plaintext listener)"),
        "--token-key PEM": (Path, "admit producers by signed tokens (aqueduct token issue) these public keys "
                                  "verify; the cookie then admits no one (re-read when the file changes)"),
        "--acl FILE": (Path, "what each client certificate's subject may write (allow SUBJECT programs=... "
                             "streams=...); re-read when it changes"),
        "--token-revoked FILE": (Path, "revoked token ids and subjects (token ID / subject NAME lines); re-read "
                                       "when it changes"),
    },
    "Spark": {
        "--master URL": (str, "Spark master URL; when not local[...], the executors read the log over Flight "
                              "(--flight), so they need no access to --log"),
        "--ingest-only": (bool, "no Spark in this process: listeners, log and the Flight server; a query "
                                "elsewhere reads it with option('bridge', HOST:PORT) as consumer 'default', "
                                "whose commits ack producers"),
        "--sink": (("parquet", "console", "memory"), "no-code Spark sink of the raw rows"),
        "--pipeline MODULE:FUNCTION": (str, "your own query instead of --sink: FUNCTION(df) gets the log as a "
                                            "streaming DataFrame and returns a DataStreamWriter (the bridge names "
                                            "it --query-name, gives it --checkpoint and starts it) or a "
                                            "StreamingQuery it started; MODULE is imported from the current "
                                            "directory or PYTHONPATH. Producers are acked after its sink committed"),
        "--query-name NAME": (str, "name of the bridge's Spark query"),
        "--output DIR": (Path, "Parquet output directory"),
        "--checkpoint DIR": (Path, "Spark checkpoint directory (default: OUTPUT/_checkpoint)"),
        "--max-records-per-trigger N": (positive_int, "cap on records per micro-batch, spent in whole epochs "
                                                      "(default: no cap)"),
        "--trigger-interval SECONDS": (non_negative_float, "micro-batch interval; 0 starts the next one as soon "
                                                           "as data is durable and the previous one committed"),
        "--idle-wait SECONDS": (non_negative_float, "how long a trigger that finds no new data waits for some "
                                                    "before it ends; the idle query then plans only this often"),
        "--spark-log-level": (("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"),
                              "log level of the Spark session"),
        "--spark-start-timeout SECONDS": (positive_float, "fail (exit 1) if Spark has not started the query "
                                                          "after this long, instead of waiting forever; raise it "
                                                          "for a cluster that queues applications"),
        "--spark-ui PORT": (port_number, "turn the Spark UI on, on this port of the driver (loopback for a "
                                         "local[...] master; default: off)"),
    },
    "the log and flow control": {
        "--flight HOST:PORT": (host_port, "serve the log over Arrow Flight (TLS, token in LOG/tls/flight.token) "
                                          "here; default: only with --ingest-only or a non-local --master, "
                                          "beside the first listener on a free port"),
        "--credits N": (positive_int, "credits per connector session: its un-durable frames in flight"),
        "--credit-budget N": (positive_int, "credits all connector sessions together may hold, so memory does "
                                            "not grow with the number of producers; each session then holds up "
                                            "to its fair share, at most --credits (default: no shared bound, "
                                            "--credits per session)"),
        "--memory-budget BYTES": (positive_int, "bytes of records (payload and key) all connector sessions "
                                                "together may have in flight; turned into a shared credit budget "
                                                "by the mean size of recent records (with --credit-budget, the "
                                                "smaller applies; default: no byte bound)"),
        "--max-lag RECORDS": (positive_int, "withhold credits while more than RECORDS durable records wait for "
                                            "Spark, from the producers over their fair share of them; at twice "
                                            "RECORDS from every producer with records waiting"),
        "--retention SECONDS": (positive_float, "keep committed log segments this long for reprocessing "
                                                "(default: truncate at once)"),
        "--segment-bytes BYTES": (positive_int, "size after which a stream starts a new log segment; truncation "
                                                "frees whole segments"),
        "--max-consumer-lag RECORDS": (positive_int, "drop a consumer that does not drive acks once it is this "
                                                     "many records behind, so it cannot pin the log forever; its "
                                                     "query then fails with a data-loss error (default: never)"),
    },
    "watching it": {
        "--status-interval SECONDS": (positive_float, "seconds between status lines on stderr, written only "
                                                      "when something changed"),
        "--log-format": (("text", "json"), "stderr lines as text, or one JSON object per line for log shippers"),
        "--metrics HOST:PORT": (host_port, "serve Prometheus metrics at http://HOST:PORT/metrics (needs the "
                                           "metrics extra; see docs/metrics.md)"),
        "--stalled-after SECONDS": (positive_float, "count a connected producer as stalled in the metrics once "
                                                    "a record of it waits this long for its ACK"),
    },
}  # fmt: skip

#: defaults of ``serve``'s options that are not :class:`BridgeConfig` fields of their name
_SERVE_DEFAULTS = {"output": Path("aqueduct-output"), "status_interval": 5.0, "log_format": "text"}


def _add_serve(sub: argparse._SubParsersAction) -> None:
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
    _log_option(p)
    add_secret_options(p, COOKIE_ENV, "the shared secret connectors must present")
    fields = BridgeConfig.__dataclass_fields__
    for title, options in _SERVE_OPTIONS.items():
        group = p.add_argument_group(title)
        for spec, (kind, text) in options.items():
            flag, _, metavar = spec.partition(" ")
            dest = flag[2:].replace("-", "_")
            default = fields[dest].default if dest in fields else _SERVE_DEFAULTS.get(dest)
            shown = f" (default: {default})" if default is not None and default is not False and "(default" not in text else ""
            group.add_argument(flag, help=text + shown, default=default, **_kind(kind, metavar))


def _kind(kind: Any, metavar: str) -> dict[str, Any]:
    """argparse's words for a kind of :data:`_SERVE_OPTIONS` (a switch has no metavar, choices show theirs)."""
    if kind is bool:
        return {"action": "store_true"}
    if isinstance(kind, tuple):
        return {"choices": kind}
    return {"type": kind, "metavar": metavar or None}


def _log_option(p: argparse.ArgumentParser) -> None:
    """``--log DIR``, which every command takes."""
    p.add_argument("--log", required=True, type=Path, metavar="DIR", help="durable log directory")


def _log_and_json(p: argparse.ArgumentParser, json_help: str) -> None:
    """The two options every log-reading command takes."""
    _log_option(p)
    p.add_argument("--json", action="store_true", help=json_help)


def _log_command(sub: argparse._SubParsersAction, name: str, summary: str, description: str, json_help: str
                 ) -> argparse.ArgumentParser:  # fmt: skip
    """A command of one log directory (``status``, ``drain``): its parser with ``--log`` and ``--json``."""
    p = sub.add_parser(name, help=summary, description=description)
    _log_and_json(p, json_help)
    return p


def _add_status(sub: argparse._SubParsersAction) -> None:
    _log_command(
        sub, "status", "show streams, positions, lag and acked points of reference of a log",
        "Read a bridge's log directory (safe while the bridge runs) and show, per stream: its connector, "
        "log head, the position Spark committed, the lag between them, and the point of reference acked "
        "to the producer.",
        "print JSON instead of a table",
    )  # fmt: skip


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


def _add_drain(sub: argparse._SubParsersAction) -> None:
    p = _log_command(
        sub, "drain", "retire the bridge running on a log: producers move, it exits once all it holds is committed",
        "Ask the bridge serving --log to drain: it refuses new producers as busy (those given several bridges "
        "move on), ends every open session with RESTART, keeps serving its consumers, and exits 0 once they "
        "committed every record it holds. Waits for that, showing what the bridge still waits for, unless "
        "--no-wait.",
        "print the outcome as JSON",
    )  # fmt: skip
    p.add_argument(
        "--no-wait", action="store_true",
        help="only ask: wait until the bridge took the request (exit 0) or refused it (exit 1), not until it exits",
    )  # fmt: skip
    p.add_argument(
        "--timeout", type=positive_float, metavar="SECONDS",
        help="stop waiting after this long, exit 1 (the bridge goes on draining; default: wait as long as it takes)",
    )  # fmt: skip


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a mistake is one line and exit 2, not ``serve``'s whole usage followed by the error.

    The error goes out as a :class:`UsageError` naming the command
    (``aqueduct-bridge serve: argument --tcp: ...``), like every other
    mistake; ``--help`` still shows the usage. Subcommands' parsers are of
    this class too (argparse makes them of their parent's).
    """

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog.partition(" ")[2] or None)


def _add_prepare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare",
        help="write Spark's class archive now, so that every serve starts fast (once per machine)",
        description=(
            "serve maps an archive of the classes Spark's JVM loads, and without one writes it when it stops: "
            "the first serve on a machine starts 7-9 s slower and its stop waits about 15 s. prepare pays "
            "that once, when you choose (an image build, a provisioning step, a unit's ExecStartPre): it runs "
            "serve on loopback in a temporary directory, has one record acked, and stops it, keeping nothing "
            "but the archive (in $AQUEDUCT_CACHE_DIR, else ~/.cache/aqueduct). Already prepared for this Java "
            "and this Spark: it says so at once."
        ),
    )
    p.add_argument("--timeout", type=positive_float, default=300.0, metavar="SECONDS",
                   help="seconds the record may take to be acked (Spark's start included; default: 300)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of a line")


def parser() -> argparse.ArgumentParser:
    """The full argument parser (exposed so tests can check ``--help``)."""
    p = OneLineParser(
        prog="aqueduct-bridge",
        description="Feed remote producers into Spark Structured Streaming, exactly once.",
    )
    add_version(p)
    sub = p.add_subparsers(dest="command", required=True, metavar="{serve,prepare,status,consumers,drain}")
    _add_serve(sub)
    _add_prepare(sub)
    _add_status(sub)
    _add_consumers(sub)
    _add_drain(sub)
    return p


def _check_serve(args: argparse.Namespace, config: BridgeConfig) -> None:
    """Everything ``serve`` can check before it creates a file or starts Spark (:class:`UsageError`).

    The bridge's own checks are :class:`~aqueduct.bridge.app.spark_bridge.SparkBridge`'s
    too (:mod:`.preflight`); Spark's (its master, Java, the query's
    directories and ``--pipeline``) are only this command's.
    """
    from aqueduct.bridge.app.preflight import (
        PreflightError,
        check_files,
        check_options,
        check_ports,
        cli_option,
    )

    try:
        check_options(config, cli_option)
        check_files(config, cli_option)
        check_ports(config, cli_option)
        if not config.ingest_only:
            _check_spark(config, args.checkpoint)
    except PreflightError as exc:
        raise UsageError(str(exc)) from None
    if config.pipeline is not None and not config.ingest_only:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the user's module sits here
        from aqueduct.bridge.app.pipeline import PipelineError, load_pipeline

        try:  # fail before Spark takes ten seconds to start
            load_pipeline(config.pipeline)
        except PipelineError as exc:
            raise UsageError(str(exc)) from None


def _check_spark(config: BridgeConfig, checkpoint: Path | None) -> None:
    """Spark's part: a master URL of a shape Spark takes, reachable; a Java to run Spark in; its directories."""
    from aqueduct.bridge.app.preflight import (
        PreflightError,
        check_master_reachable,
        check_new_directory,
    )

    if not SPARK_MASTER.fullmatch(config.master):
        raise PreflightError(
            f"--master {config.master!r}: not a Spark master URL (local, local[N], local[*], "
            "spark://HOST:PORT, yarn, k8s://URL)"
        )
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        raise PreflightError("Spark needs Java (17 or newer): no java on PATH and JAVA_HOME is not set")
    if config.pipeline is None and config.sink == "parquet":
        check_new_directory(config.output_dir, "--output")
    if checkpoint is not None:
        check_new_directory(checkpoint, "--checkpoint")
    check_master_reachable(config.master, "--master")


def _config(args: argparse.Namespace) -> BridgeConfig:
    """The bridge ``serve``'s options describe (the cookie read from where it was given)."""
    return BridgeConfig(
        log_dir=args.log,
        quic=args.quic,
        tcp=args.tcp,
        wallaroo_tcp=args.wallaroo_tcp,
        cookie=read_secret(args, COOKIE_ENV),
        certfile=args.cert,
        keyfile=args.key,
        client_cafile=args.client_ca,
        tcp_tls=args.tcp_tls,
        token_key=args.token_key,
        acl=args.acl,
        token_revoked=args.token_revoked,
        quic_backend=args.quic_backend,
        master=args.master,
        sink=args.sink,
        pipeline=args.pipeline,
        query_name=args.query_name,
        output_dir=args.output,
        checkpoint_dir=args.checkpoint or args.output / "_checkpoint",
        max_records_per_trigger=args.max_records_per_trigger,
        trigger_interval=args.trigger_interval,
        idle_wait=args.idle_wait,
        credits=args.credits,
        credit_budget=args.credit_budget,
        memory_budget=args.memory_budget,
        max_lag=args.max_lag,
        retention=args.retention,
        segment_bytes=args.segment_bytes,
        max_consumer_lag=args.max_consumer_lag,
        spark_log_level=args.spark_log_level,
        spark_start_timeout=args.spark_start_timeout,
        metrics=args.metrics,
        stalled_after=args.stalled_after,
        spark_ui_port=args.spark_ui,
        flight=args.flight,
        ingest_only=args.ingest_only,
    )


def _serve(args: argparse.Namespace) -> int:
    from aqueduct.bridge.app.jvm import start_gateway_launch
    from aqueduct.logs import configure_logging

    config = _config(args)
    _check_serve(args, config)
    configure_logging(args.log_format)
    if not config.ingest_only:  # Spark's JVM starts while the bridge opens its log and listens
        start_gateway_launch(config.master)
    from aqueduct.bridge.app.service import run_forever

    return run_forever(config, status_interval=args.status_interval)


def _prepare(args: argparse.Namespace) -> int:
    import json

    from aqueduct.bridge.app.prepare import PrepareError, prepare

    try:
        done = prepare(args.timeout, lambda line: print(f"aqueduct-bridge prepare: {line}", file=sys.stderr, flush=True))
    except PrepareError as exc:
        print(f"aqueduct-bridge prepare: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(done.doc()))
    elif done.archive is None:
        print(f"nothing to prepare: {done.why}")
    else:
        size = int(done.doc()["bytes"] or 0)
        print(f"{done.why}: {done.archive} ({size >> 20} MB)")
    return 0


def _status(args: argparse.Namespace) -> int:
    from aqueduct.bridge.app.status import format_table, read_status

    try:
        report = read_status(args.log)
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        import json

        print(json.dumps(report, indent=2))
    else:
        print(format_table(report))
    return 0


def _consumers(args: argparse.Namespace) -> int:
    import json

    from aqueduct.bridge.app.status import consumer_rows, format_consumers
    from aqueduct.bridge.storage.consumers import ConsumerError, drop_consumer
    from aqueduct.bridge.storage.view import NotALog, check_log_dir

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
        raise UsageError(str(exc)) from None
    print(json.dumps(rows, indent=2) if args.json else format_consumers(rows))
    return 0


def _drain(args: argparse.Namespace) -> int:
    import json

    from aqueduct.bridge.app.drain_files import bridge_running, request_drain, wait_for_drain
    from aqueduct.bridge.storage.view import NotALog, check_log_dir

    try:
        check_log_dir(args.log)
    except NotALog as exc:
        raise UsageError(str(exc)) from None
    if not bridge_running(args.log):
        raise UsageError(f"no bridge is running on log {str(args.log)!r} (nothing holds its lock): nothing to drain")
    request = request_drain(args.log)
    if args.no_wait:  # only until the bridge answered: taken, or refused (a SparkBridge), or not taken at all
        outcome = wait_for_drain(args.log, request, answered=True)
        if args.json:
            print(json.dumps({"log": str(args.log), "state": outcome.state, "taken": outcome.taken, "request": request}))
        elif outcome.taken:
            print(f"drain requested: the bridge on {args.log} took it and exits once its consumers committed all it holds")
        else:
            print(f"aqueduct-bridge drain: {outcome.state}", file=sys.stderr)
        return 0 if outcome.taken else 1
    outcome = wait_for_drain(
        args.log, request, args.timeout, lambda line: print(f"aqueduct-bridge drain: {line}", file=sys.stderr, flush=True)
    )  # fmt: skip
    if args.json:
        doc = outcome.doc
        print(json.dumps({
            "log": str(args.log), "state": outcome.state, "drained": outcome.drained, "seconds": round(outcome.seconds, 3),
            "sessions_ended": doc.get("sessions_ended"), "waiting": doc.get("waiting"),
        }))  # fmt: skip
    elif outcome.drained:
        print(
            f"drained: the bridge on {args.log} exited after {outcome.seconds:.1f} s, everything it held committed "
            f"({outcome.doc.get('sessions_ended', 0)} producer session(s) sent elsewhere)"
        )
    else:
        print(f"aqueduct-bridge drain: {outcome.state}", file=sys.stderr)
    return 0 if outcome.drained else 1


def _main(argv: Sequence[str] | None) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    args = parser().parse_args(argv)
    handlers = {"serve": _serve, "prepare": _prepare, "status": _status, "consumers": _consumers, "drain": _drain}
    try:
        return handlers[args.command](args)
    except UsageError as exc:
        exc.command = exc.command or args.command
        raise
    except ModuleNotFoundError as exc:
        if exc.name not in SPARK_EXTRA:
            raise
        raise UsageError(
            f"needs {exc.name}, which the spark extra brings: pip install '{DISTRIBUTION}[spark]'",
            args.command,
        ) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``aqueduct-bridge``; returns the exit status (2 for bad input, one line on stderr)."""
    return run("aqueduct-bridge", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
