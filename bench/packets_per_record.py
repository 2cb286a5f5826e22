"""``python -m bench.packets_per_record``: the QUIC frames and CPU one producer record costs, each side.

A fleet of producers each sending a record now and then (``bench.fleet``'s
2 a second) is served packet by packet: nothing coalesces within one
connection, so what a record's round trip costs in packets is what the
fleet costs the bridge and the producers' hosts. This runs one bridge
(the real listener, ingest and fsync'ed log, acking what is durable, as in
``bench.fleet``) and ``--producers`` producers on aioquic in this one
process, has each send ``--records`` records at ``--rate`` a second after
its session started, and counts the QUIC frames each side built, by type, and the UDP datagrams,
per record, in aioquic's packet builder (every frame of every packet sent,
ACK-only packets included); and the process's CPU per record (both sides
and the log's thread: compare runs, not sides).

Run it alone: ``flock /tmp/aqueduct-heavy.lock python -m bench.packets_per_record``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from aioquic.quic import packet_builder
from aioquic.quic.packet import QuicFrameType

from bench.fleet import payload


def frame_name(frame_type: int) -> str:
    """A QUIC frame type's name; every STREAM variant (0x08-0x0f, its flag bits set or not) is ``STREAM``."""
    if QuicFrameType.STREAM_BASE <= frame_type <= QuicFrameType.STREAM_BASE | 0x07:
        return "STREAM"
    return QuicFrameType(frame_type).name if frame_type in QuicFrameType._value2member_map_ else hex(frame_type)


class FrameCount:
    """QUIC frames and UDP datagrams built by aioquic, by side (``client``/``server``), while installed."""

    def __init__(self) -> None:
        self.frames: Counter[tuple[str, str]] = Counter()
        self.datagrams: Counter[str] = Counter()
        self._start_frame = packet_builder.QuicPacketBuilder.start_frame
        self._flush = packet_builder.QuicPacketBuilder.flush

    def install(self) -> None:
        frames, datagrams, start_frame, flush = self.frames, self.datagrams, self._start_frame, self._flush

        def counted(builder: Any, frame_type: int, *args: Any, **kwargs: Any) -> Any:
            frames["client" if builder._is_client else "server", frame_name(frame_type)] += 1
            return start_frame(builder, frame_type, *args, **kwargs)

        def flushed(builder: Any) -> Any:
            built = flush(builder)
            datagrams["client" if builder._is_client else "server"] += len(built[0])
            return built

        packet_builder.QuicPacketBuilder.start_frame = counted  # type: ignore[method-assign]
        packet_builder.QuicPacketBuilder.flush = flushed  # type: ignore[method-assign]

    def uninstall(self) -> None:
        packet_builder.QuicPacketBuilder.start_frame = self._start_frame  # type: ignore[method-assign]
        packet_builder.QuicPacketBuilder.flush = self._flush  # type: ignore[method-assign]


async def measure(producers: int, records: int, rate: float) -> dict[str, Any]:
    """Frames per record by side and type, and CPU per record, over the records' sending and acking."""
    from aqueduct.bridge.ingest.service import Ingest
    from aqueduct.bridge.storage.log import DurableLog
    from aqueduct.connector.producer.client import Connector
    from aqueduct.connector.worker.aqueduct_listener import serve_aqueduct
    from aqueduct.connector.worker_session import WorkerConfig
    from aqueduct.runtime.certs import generate_certs

    class AckingIngest(Ingest):
        async def group_commit(self) -> dict[int, int]:
            ends = await super().group_commit()
            self.on_committed(ends)  # Spark, infinitely fast: committed as soon as durable
            self.truncate_below(ends)
            return ends

    count = FrameCount()
    with tempfile.TemporaryDirectory(prefix="aqueduct-packets-") as tmp:
        certs = generate_certs(Path(tmp) / "certs")
        log = DurableLog(Path(tmp) / "log")
        ingest = AckingIngest(log)
        running = asyncio.ensure_future(ingest.run())
        server = await serve_aqueduct(
            "127.0.0.1", 0, ingest, WorkerConfig(), certfile=certs.server_cert, keyfile=certs.server_key
        )
        url = f"aqueduct://127.0.0.1:{server.port}"
        conns = [Connector(url, program="packets", instance=f"p{i}", cafile=str(certs.ca)) for i in range(producers)]
        try:
            await asyncio.gather(*(c.connect() for c in conns))
            streams = [await c.stream(i, f"packets/{i}") for i, c in enumerate(conns)]
            await asyncio.gather(*(c.wait_all_acked() for c in conns))  # sessions settled: from here, records only
            count.install()
            cpu, began = time.process_time(), time.perf_counter()
            loop = asyncio.get_running_loop()
            start = loop.time()
            for n in range(records):
                for i, stream in enumerate(streams):
                    await stream.send(payload(i, n), message_id=n)
                delay = start + (n + 1) / rate - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            await asyncio.gather(*(c.wait_all_acked() for c in conns))
            cpu, seconds = time.process_time() - cpu, time.perf_counter() - began
        finally:
            count.uninstall()  # before the closes: their frames are no record's
            for c in conns:
                await c.close(flush_timeout=1.0)
            await server.close()
            running.cancel()
            log.close()
    sent = producers * records
    per_side = {
        side: {name: round(n / sent, 2) for (s, name), n in sorted(count.frames.items()) if s == side}
        for side in ("client", "server")
    }
    return {
        "producers": producers, "records": sent, "rate": rate, "seconds": round(seconds, 2),
        "frames_per_record": {side: round(sum(f.values()), 2) for side, f in per_side.items()},
        "datagrams_per_record": {side: round(count.datagrams[side] / sent, 2) for side in ("client", "server")},
        "by_type": per_side, "cpu_ms_per_record": round(cpu / sent * 1000, 3), "loadavg": os.getloadavg()[0],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.packets_per_record", description=__doc__.splitlines()[0])
    parser.add_argument("--producers", type=int, default=20, help="producers, one stream each (default 20)")
    parser.add_argument("--records", type=int, default=20, help="records each producer sends (default 20)")
    parser.add_argument("--rate", type=float, default=2.0, help="records a second per producer (default 2)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args.producers, args.records, args.rate))
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        frames = result["frames_per_record"]
        print(
            f"{result['records']} records from {args.producers} producers at {args.rate:g}/s: QUIC frames per record "
            f"{frames['client']} from the producers, {frames['server']} from the bridge "
            f"(UDP datagrams {result['datagrams_per_record']['client']} and {result['datagrams_per_record']['server']}) "
            f"(by type: {result['by_type']}); CPU {result['cpu_ms_per_record']} ms per record, both sides"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
