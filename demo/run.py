"""``python -m demo`` (``make demo``): a bridge, N producer processes, and a verdict.

The demo is the whole system in one command: a bridge with local Spark in
this process, producers as *separate processes* (so they really are remote
peers: own interpreter, own event loop, talking QUIC over 127.0.0.1), a live
progress display, then an independent check of the Parquet output with
pyarrow (:mod:`demo.verify`). The producers exit once every
message they sent is acked or, after a reconnect, durable in the log; the
demo then waits until Spark has committed everything the log holds, so the
output it checks must be complete.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from aqueduct.bridge.app.service import Bridge, BridgeConfig, BridgeProgress
from demo.verify import verify_output
from demo.workload import Workload

_TICK = 0.25  # seconds between progress samples
_PLAIN_EVERY = 5.0  # seconds between progress lines when stderr is not a TTY


@dataclass(frozen=True)
class DemoConfig:
    """Knobs of ``python -m demo`` (defaults finish in about a minute on 2 cores)."""

    producers: int = 4
    events: int = 5_000
    streams: int = 2
    epoch: int = 100
    transport: str = "quic"
    master: str = "local[2]"
    keep: Path | None = None
    timeout: float = 300.0
    trigger_interval: float = 1.0

    @property
    def workload(self) -> Workload:
        return Workload(self.producers, self.streams, self.events, self.epoch)


class ProgressDisplay:
    """One updating line on a TTY, a line every few seconds otherwise."""

    def __init__(self, out: TextIO, workload: Workload) -> None:
        self.out = out
        self.workload = workload
        self.tty = out.isatty()
        self.last_line = 0.0
        self.started = time.monotonic()

    def update(self, running: int, p: BridgeProgress, force: bool = False) -> None:
        now = time.monotonic()
        if not (self.tty or force) and now - self.last_line < _PLAIN_EVERY:
            return
        self.last_line = now
        elapsed = now - self.started
        rate = p.messages / elapsed if elapsed > 0 else 0.0
        total, records = self.workload.total, self.workload.records
        line = (
            f"producers running {running} | received {p.messages:,}/{total:,} "
            f"({100 * p.messages / total:.0f}%) | committed in sink "
            f"{100 * p.committed_records / records:.0f}% | batches {p.batches} "
            f"| {rate:,.0f} msg/s | {elapsed:.0f}s"
        )
        if self.tty:
            self.out.write("\r\x1b[2K" + line)
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def done(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()


def _producer_env() -> dict[str, str]:
    """The producers run ``python -m demo.producer``: put this checkout on their path.

    ``demo`` is tooling beside the product package, not installed with it, so
    a producer started from any working directory must be told where it is.
    """
    root = str(Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root if not path else f"{root}{os.pathsep}{path}"}


def _producer_command(config: DemoConfig, index: int, bridge: Bridge) -> list[str]:
    if config.transport == "quic":
        assert bridge.quic_address is not None
        host, port = bridge.quic_address
        url, tls = f"aqueduct://{host}:{port}", ["--cafile", str(bridge.cafile)]
    else:
        assert bridge.tcp_address is not None
        host, port = bridge.tcp_address
        url, tls = f"tcp://{host}:{port}", []
    return [
        sys.executable, "-m", "demo.producer", "--url", url, *tls,
        "--index", str(index), "--producers", str(config.producers),
        "--streams", str(config.streams), "--events", str(config.events),
        "--epoch", str(config.epoch), "--timeout", str(config.timeout),
    ]  # fmt: skip


async def demo(config: DemoConfig, work: Path, status: TextIO, spark: Any = None) -> dict:
    """Run the demo in ``work``; return the summary (``spark``: reuse a session, for tests)."""
    workload = config.workload
    output = work / "output"
    bridge = Bridge(
        BridgeConfig(
            log_dir=work / "log",
            quic=("127.0.0.1", 0) if config.transport == "quic" else None,
            tcp=("127.0.0.1", 0) if config.transport == "tcp" else None,
            master=config.master,
            output_dir=output,
            checkpoint_dir=output / "_checkpoint",
            trigger_interval=config.trigger_interval,
            spark_log_level="ERROR",  # the demo's own progress line is the story
        ),
        spark=spark,
    )
    print(f"aqueduct demo: starting bridge and Spark ({config.master}) in {work}", file=status)
    procs: list[asyncio.subprocess.Process] = []
    try:
        await bridge.start()
        print(
            f"aqueduct demo: {config.producers} producers x {config.streams} streams, "
            f"{workload.total:,} messages over {config.transport.upper()}",
            file=status,
        )
        started = time.monotonic()
        for i in range(config.producers):
            log = open(work / f"producer-{i}.log", "wb")  # the child keeps its own descriptor
            procs.append(
                await asyncio.create_subprocess_exec(
                    *_producer_command(config, i, bridge), stdout=log, stderr=log, env=_producer_env()
                )
            )
            log.close()
        display = ProgressDisplay(status, workload)
        deadline = started + config.timeout
        while (
            any(p.returncode is None for p in procs)
            and time.monotonic() < deadline
            and not bridge.failed
        ):
            await asyncio.sleep(_TICK)
            display.update(sum(pr.returncode is None for pr in procs), bridge.progress())
        timed_out = any(p.returncode is None for p in procs)
        if not timed_out and not bridge.failed:
            try:
                await bridge.drained(max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                timed_out = True
        display.update(0, bridge.progress(), force=True)
        display.done()
        elapsed = time.monotonic() - started
        codes = [p.returncode for p in procs]
        progress = bridge.progress()
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
        await bridge.stop()
    result = verify_output(output, workload.expected())
    return {
        "ok": result.ok and not timed_out and not bridge.failed and all(c == 0 for c in codes),
        "producers": config.producers,
        "streams": config.producers * config.streams,
        "messages": workload.total,
        "transport": config.transport,
        "elapsed_s": round(elapsed, 2),
        "messages_per_s": round(workload.total / elapsed, 1) if elapsed else None,
        "batches": progress.batches,
        "producer_exit_codes": codes,
        "timed_out": timed_out,
        "verification": result.to_dict(),
        "problems": result.problems()
        + (["timed out"] if timed_out else [])
        + [f"producer {i} exited with {c}" for i, c in enumerate(codes) if c != 0 and c is not None]
        + ([bridge.failed] if bridge.failed else []),
        "directory": str(work) if config.keep else None,
    }


def _print_summary(summary: dict, out: TextIO) -> None:
    v = summary["verification"]
    verdict = "PASSED" if summary["ok"] else "FAILED"
    lines = [
        f"aqueduct demo {verdict}",
        f"  sent      {summary['messages']:,} messages from {summary['producers']} producers "
        f"on {summary['streams']} streams over {summary['transport'].upper()}",
        f"  elapsed   {summary['elapsed_s']} s ({summary['messages_per_s']:,} msg/s end to end, "
        f"{summary['batches']} micro-batches)",
        f"  in sink   {v['rows']:,} rows in {v['streams']} streams "
        f"(expected {v['expected']:,})",
        f"  checks    duplicates {v['duplicates']}, missing {v['missing']}, "
        f"unexpected {v['unexpected']}, wrong payloads {v['wrong_payloads']}, "
        f"streams out of order {v['out_of_order_streams']}, "
        f"epochs split across batches {v['split_epochs']}",
    ]
    lines += [f"  problem   {p}" for p in summary["problems"]]
    if summary["directory"]:
        lines.append(f"  kept in   {summary['directory']}")
    print("\n".join(lines), file=out)


def run_demo(config: DemoConfig, as_json: bool = False) -> int:
    """Run the demo; print the summary (JSON on request); 0 if verification passed."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if config.keep is not None:
        config.keep.mkdir(parents=True, exist_ok=True)
        summary = asyncio.run(demo(config, config.keep, sys.stderr))
    else:
        with tempfile.TemporaryDirectory(prefix="aqueduct-demo-") as tmp:
            summary = asyncio.run(demo(config, Path(tmp), sys.stderr))
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(summary, sys.stdout)
    return 0 if summary["ok"] else 1
