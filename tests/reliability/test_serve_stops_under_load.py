"""``aqueduct-bridge serve`` ended under load: by SIGINT (Ctrl-C), by its Spark JVM SIGKILLed, by its JVM's own exit.

A real bridge process (its own Spark JVM, Parquet, checkpoint) while
producers send at a steady pace the whole time, so each end lands while
records flow and micro-batches run; they record every ACK they get. Each
end must stop the bridge by itself with one line saying why and no
Python traceback (exit 0 for SIGINT; 1 for a JVM that ended under it, so
a supervisor restarts it), leaving no process behind, and lose nothing
acked.

SIGINT and the JVM's SIGKILL share one bridge (the default ``serve``; a
Spark start costs tens of seconds on two cores), restarted after each on
the same log and checkpoint: the restarted bridge acks the same producers
again, and in the end every record sent, each acked once, is in the sink
once with its payload. A JVM exiting by itself needs user code in the
JVM's process (a ``--pipeline``); the restart on what a dead JVM left is
the SIGKILL's, so that bridge is not restarted.

A previous version of the first test waited, after the SIGINT restart,
for a micro-batch that never came: its producers (a fixed workload) had
been acked for everything before the SIGINT, so the restarted query had
no data to run a batch on. Paced senders that run until told to stop keep
the load on across every end.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from aqueduct.connector.producer.client import Connector, Delivery
from demo.sinkfiles import read_committed
from demo.verify import verify_output
from tests.reliability import exiting_pipeline
from tests.reliability.faults import Figures, tally
from tests.reliability.test_bridge_faults import (
    DRAIN_TIMEOUT,
    BridgeProcess,
    assert_exactly_once,
    bridge_process,
    drain,
    record,
)
from tests.spark.test_bridge_stops import _jvms
from tests.waiting import after

pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.skipif(shutil.which("java") is None, reason="needs a JVM for Spark: run `make java`"),
]

RATE = 100.0  # messages/s per stream: load throughout, light enough for two cores beside Spark
STOP_TIMEOUT = 60.0  # seconds a bridge gets to end by itself; only there to catch hangs


class PacedProducer:
    """One connector sending on its streams at ``RATE`` until told to stop, recording every ACK."""

    def __init__(self, url: str, index: int, streams: int = 2) -> None:
        self.url = url
        self.index = index
        self.stream_ids = [10 * (index + 1) + s for s in range(streams)]
        self.sent: dict[int, dict[int, bytes]] = {sid: {} for sid in self.stream_ids}
        self.acked: list[tuple[int, int, bytes]] = []  # (stream, message id, payload), as ACKs came
        self.stop = asyncio.Event()

    def _delivered(self, error: Exception | None, delivery: Delivery) -> None:
        if error is None and delivery.payload is not None:
            self.acked.append((delivery.stream_id, delivery.message_id, delivery.payload))

    async def run(self) -> None:
        """Send until :attr:`stop`, riding out bridge restarts; return once everything sent is acked."""
        async with Connector(
            self.url, program="paced", instance=f"p{self.index}", backoff=(0.05, 0.5), on_delivery=self._delivered
        ) as conn:
            streams = [await conn.stream(sid, f"paced/{self.index}/{sid}") for sid in self.stream_ids]
            loop = asyncio.get_running_loop()
            began, n = loop.time(), 0
            while not self.stop.is_set():
                for stream in streams:
                    mid = len(self.sent[stream.stream_id])
                    self.sent[stream.stream_id][mid] = b"paced %d %d" % (stream.stream_id, mid)
                    await stream.send(self.sent[stream.stream_id][mid], message_id=mid)
                n += 1
                await asyncio.sleep(max(0.0, began + n / RATE - loop.time()))
            await conn.wait_all_acked(DRAIN_TIMEOUT)


def traces(text: str, java: bool = True) -> list[str]:
    """Lines of Python tracebacks (and Java stack traces, unless ``java`` is false) in ``text``."""
    starts = ("Traceback", "\tat ") if java else ("Traceback",)
    return [line for line in text.splitlines() if line.startswith(starts)]


class Loaded:
    """A bridge process with paced producers sending to it, across its ends and restarts."""

    def __init__(self, bridge: BridgeProcess) -> None:
        self.bridge = bridge
        self.producers = [PacedProducer(f"tcp://127.0.0.1:{bridge.tcp_port}", i) for i in range(2)]
        self.running = asyncio.gather(*(p.run() for p in self.producers))

    def acked(self) -> int:
        """Records acked so far, all producers together."""
        return sum(len(p.acked) for p in self.producers)

    async def under_load(self) -> None:
        """Until this incarnation committed a micro-batch and acked producers (who resumed, after a restart)."""
        bridge = self.bridge
        await bridge.alive_while(bridge.wait_for_commit(beyond=bridge.committed_batches()), DRAIN_TIMEOUT)
        await bridge.alive_while(after(self.acked, "records acked by this bridge", DRAIN_TIMEOUT), DRAIN_TIMEOUT)

    async def end(self, fault: Callable[[list[psutil.Process]], None]) -> tuple[int, str]:
        """Under load, do ``fault`` to the bridge's process tree; its exit status and lines once it and the tree ended."""
        await self.under_load()
        child = self.bridge.child
        since, family = child.log.stat().st_size, psutil.Process(child.pid).children(recursive=True)
        fault(family)
        status = await child.wait(STOP_TIMEOUT)
        _, alive = await asyncio.to_thread(psutil.wait_procs, family, timeout=30)
        assert not alive, f"processes outlived the bridge: {alive}"
        return status, child.log.read_bytes()[since:].decode(errors="replace")

    async def finish(self) -> dict[int, dict[int, bytes]]:
        """Stop the producers once the running bridge acks them; return what they sent, once it is in the sink."""
        await self.under_load()
        for p in self.producers:
            p.stop.set()
        await self.bridge.alive_while(self.running, DRAIN_TIMEOUT)  # everything sent is acked
        expected = {sid: ids for p in self.producers for sid, ids in p.sent.items()}
        await drain(self.bridge, expected)
        await self.bridge.stop()
        return expected

    async def close(self) -> None:
        self.running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.running

    def assert_every_ack_in_the_sink_once(self, figures: Figures) -> None:
        """Every record acked so far is in the sink once with its payload (one sent but not acked may not be)."""
        acked: dict[int, dict[int, bytes]] = {}
        for sid, mid, data in (ack for p in self.producers for ack in p.acked):
            acked.setdefault(sid, {})[mid] = data
        table = read_committed(self.bridge.output)
        columns = [[] if table is None else table.column(c).to_pylist() for c in ("stream_id", "message_id", "payload")]
        rows = zip(*columns, strict=True)
        counted = tally(acked, rows)
        figures.count(counted)
        assert acked and (counted.lost, counted.duplicates, counted.changed) == (0, 0, 0), counted

    def assert_every_ack_delivered_once(self, expected: dict[int, dict[int, bytes]], figures: Figures) -> None:
        """The sink holds every record sent once with its payload; every one was acked, once."""
        result = verify_output(self.bridge.output, expected)
        record(figures, result)
        figures.extra.update(bridge_starts=self.bridge.starts)
        assert_exactly_once(result, self.bridge)
        acks = [ack for p in self.producers for ack in p.acked]
        assert sorted(acks) == sorted((sid, mid, data) for sid, ids in expected.items() for mid, data in ids.items())


def kill_the_jvm(family: list[psutil.Process]) -> None:
    (jvm,) = _jvms(family)
    jvm.kill()


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("aqueduct-bridge: error:")]


async def test_sigint_and_a_killed_jvm_under_load_end_serve_with_one_line_and_it_resumes_exactly_once(
    figures: Figures, tmp_path: Path, certs
) -> None:
    async with bridge_process(tmp_path, certs, tcp=True) as bridge:
        await bridge.start()
        loaded = Loaded(bridge)
        try:
            assert bridge.child.proc is not None
            status, text = await loaded.end(lambda _: bridge.child.proc.send_signal(signal.SIGINT))  # Ctrl-C
            figures.extra["acked_at_sigint"] = loaded.acked()
            assert status == 0 and not traces(text), text[-3000:]
            assert text.count("aqueduct-bridge: SIGINT: stopped in ") == 1, text[-3000:]

            await bridge.start()
            status, text = await loaded.end(kill_the_jvm)
            figures.extra["acked_at_jvm_kill"] = loaded.acked()
            assert status == 1 and not traces(text), text[-3000:]
            assert error_lines(text) == ["aqueduct-bridge: error: Spark's JVM killed by SIGKILL under the running bridge"]

            await bridge.start()
            expected = await loaded.finish()
        finally:
            await loaded.close()
    figures.faults = {"sigint": 1, "jvm_sigkill": 1}
    loaded.assert_every_ack_delivered_once(expected, figures)


async def test_the_jvm_exiting_by_itself_under_load_ends_serve_with_one_line_and_keeps_what_it_acked(
    figures: Figures, tmp_path: Path, certs
) -> None:
    """User code in the bridge's pipeline calls ``System.exit(3)``: no signal, the JVM's own exit.

    Not restarted: a restart on what a dead JVM left is the first test's
    (SIGKILL); here every record acked before the exit must be in the sink.
    """
    exit_file = tmp_path / "exit-now"
    env = {exiting_pipeline.OUTPUT_ENV: str(tmp_path / "out"), exiting_pipeline.EXIT_ENV: str(exit_file)}
    pipeline = f"{exiting_pipeline.__name__}:{exiting_pipeline.raw_rows_until_told_to_exit.__name__}"
    async with bridge_process(tmp_path, certs, tcp=True, args=("--pipeline", pipeline), env=env) as bridge:
        await bridge.start()
        loaded = Loaded(bridge)
        try:
            status, text = await loaded.end(lambda _: exit_file.touch())
        finally:
            await loaded.close()
    figures.faults = {"jvm_exit": exiting_pipeline.EXIT_STATUS}
    figures.extra["acked_at_jvm_exit"] = loaded.acked()
    # The JVM's own last words (Spark's errors as its shutdown stops the query under a
    # running batch) are its log, for the operator to read; the bridge adds one line.
    assert status == 1 and not traces(text, java=False), text[-3000:]
    assert error_lines(text) == [
        f"aqueduct-bridge: error: Spark's JVM exit status {exiting_pipeline.EXIT_STATUS} under the running bridge"
    ], text[-3000:]
    loaded.assert_every_ack_in_the_sink_once(figures)
