"""``aqueduct-bridge serve`` ended under load: by SIGINT (Ctrl-C), and by its Spark JVM SIGKILLed.

One bridge process (its own Spark JVM, Parquet sink, checkpoint) on one
log, started three times: a Spark start costs tens of seconds on two
cores, so both ends share it. Producers send at a steady pace the whole
time, so each end lands while records flow and micro-batches run, and
they record every ACK they get. Each end must stop the bridge by itself
with one line saying why and no traceback (exit 0 for SIGINT, 1 for the
JVM, so a supervisor restarts it), leaving no process behind; the
restarted bridge acks the same producers again, and in the end every
record sent, the acked ones first of all, is in the sink once with its
payload.

A previous version of this test waited, after the SIGINT restart, for a
micro-batch that never came: its producers (a fixed workload) had sent
and been acked for everything before the SIGINT, so the restarted query
had no data to run a batch on. Paced senders that run until told to stop
keep the load on across every end.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import psutil
import pytest

from aqueduct.connector.producer.client import Connector, Delivery
from demo.verify import verify_output
from tests.reliability.faults import Figures
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

pytestmark = [pytest.mark.slow, pytest.mark.spark]

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


def traces(text: str) -> list[str]:
    """Lines of Python tracebacks and Java stack traces in ``text``: what an operator must not be shown."""
    return [line for line in text.splitlines() if line.startswith(("Traceback", "\tat "))]


async def ended_by_itself(bridge: BridgeProcess, since: int, family: list[psutil.Process]) -> tuple[int, str]:
    """The bridge's exit status and what it logged since byte ``since``, once it and ``family`` ended."""
    status = await bridge.child.wait(STOP_TIMEOUT)
    _, alive = await asyncio.to_thread(psutil.wait_procs, family, timeout=30)
    assert not alive, f"processes outlived the bridge: {alive}"
    return status, bridge.child.log.read_bytes()[since:].decode(errors="replace")


async def test_sigint_and_a_killed_jvm_under_load_end_serve_with_one_line_and_it_resumes_exactly_once(
    figures: Figures, tmp_path: Path, certs
) -> None:
    async with bridge_process(tmp_path, certs, tcp=True) as bridge:
        await bridge.start()
        producers = [PacedProducer(f"tcp://127.0.0.1:{bridge.tcp_port}", i) for i in range(2)]
        running = asyncio.gather(*(p.run() for p in producers))

        def acked() -> int:
            return sum(len(p.acked) for p in producers)

        async def under_load() -> tuple[int, list[psutil.Process]]:
            """Once this incarnation committed a micro-batch and acked producers: where its log goes on, its tree."""
            await bridge.alive_while(bridge.wait_for_commit(beyond=bridge.committed_batches()), DRAIN_TIMEOUT)
            await bridge.alive_while(after(acked, "records acked by this bridge", DRAIN_TIMEOUT), DRAIN_TIMEOUT)
            return bridge.child.log.stat().st_size, psutil.Process(bridge.child.pid).children(recursive=True)

        try:
            since, family = await under_load()
            assert bridge.child.proc is not None
            bridge.child.proc.send_signal(signal.SIGINT)  # Ctrl-C
            status, text = await ended_by_itself(bridge, since, family)
            acked_at_sigint = acked()
            assert status == 0 and not traces(text), text[-3000:]
            assert text.count("aqueduct-bridge: SIGINT: stopped in ") == 1, text[-3000:]

            await bridge.start()
            since, family = await under_load()  # the producers resumed: acks from the new bridge
            (jvm,) = _jvms(family)
            jvm.kill()
            status, text = await ended_by_itself(bridge, since, family)
            acked_at_jvm_kill = acked()
            failed = [line for line in text.splitlines() if line.startswith("aqueduct-bridge: error:")]
            assert status == 1 and not traces(text), text[-3000:]
            assert failed == ["aqueduct-bridge: error: Spark's JVM killed by SIGKILL under the running bridge"], (
                text[-3000:]
            )

            await bridge.start()
            await under_load()
            for p in producers:
                p.stop.set()
            await bridge.alive_while(running, DRAIN_TIMEOUT)  # everything sent is acked
            expected = {sid: ids for p in producers for sid, ids in p.sent.items()}
            drained_s = await drain(bridge, expected)
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
        await bridge.stop()
    result = verify_output(bridge.output, expected)
    record(figures, result)
    figures.faults = {"sigint": 1, "jvm_sigkill": 1}
    figures.extra.update(
        bridge_starts=bridge.starts, acked_at_sigint=acked_at_sigint, acked_at_jvm_kill=acked_at_jvm_kill,
        drain_after_producers_s=round(drained_s, 1),
    )  # fmt: skip
    assert_exactly_once(result, bridge)
    acks = [ack for p in producers for ack in p.acked]
    assert sorted(acks) == sorted((sid, mid, payload) for sid, ids in expected.items() for mid, payload in ids.items())
