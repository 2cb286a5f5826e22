"""One simulated remote producer of the demo, run as its own process.

``python -m demo.producer --url aqueduct://127.0.0.1:4433
--cafile ca.pem --index 0 --producers 4 --streams 2 --events 25000``

It sends its share of the :class:`~demo.workload.Workload` with
the :class:`~aqueduct.connector.Connector` library, round-robin over
its streams, and exits 0 once every message is acked, i.e. committed in the
bridge's Spark sink. Reconnects and re-sends after a bridge restart are the
library's job; if this process itself is restarted it skips what the
bridge's OK says is already durable. The last stdout line is a JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence

from aqueduct.connector import Connector
from aqueduct.console import COOKIE_ENV, add_secret_options, read_secret
from demo.workload import Workload, payload

PROGRAM = "aqueduct-demo"


async def produce(
    url: str,
    workload: Workload,
    index: int,
    *,
    cafile: str | None = None,
    cookie: bytes = b"",
    timeout: float = 300.0,
) -> dict:
    """Send producer ``index``'s messages and wait until all are acked; return stats."""
    started = time.monotonic()
    async with Connector(
        url, program=PROGRAM, instance=f"p{index}", cookie=cookie, cafile=cafile
    ) as conn:
        await send_share(conn, workload, index)
        sent_at = time.monotonic()
        await conn.wait_all_acked(timeout)
        return {
            "producer": index,
            "sent_s": round(sent_at - started, 3),
            "acked_s": round(time.monotonic() - started, 3),
            "frames_sent": conn.stats.sent,
            "resent": conn.resent,
            "connections": conn.stats.connections,
        }


async def send_share(
    conn: Connector,
    workload: Workload,
    index: int,
    between_rounds: Callable[[int], Awaitable[None]] | None = None,
) -> None:
    """Send producer ``index``'s messages on ``conn``, round-robin over its streams, from each stream's resume point.

    Apart from :func:`produce` so that a test can hand it a connector of its
    own making (several bridges, a delivery callback) and still send the
    workload the verifier expects. ``between_rounds(k)``, if given, is awaited
    before round ``k`` (the ``k``-th message of every stream): a test holds
    the producer there, at a point of its choosing, and lets it go on.
    """
    sids = workload.stream_ids(index)
    streams = [await conn.stream(sid, workload.stream_name(sid)) for sid in sids]
    plans = [workload.steps(i) for i in range(len(sids))]
    for k in range(max(len(p) for p in plans)):
        if between_rounds is not None:
            await between_rounds(k)
        for stream, plan in zip(streams, plans, strict=True):
            if k >= len(plan) or plan[k].message_id < stream.resume_from:
                continue
            step = plan[k]
            await stream.send(
                None if step.boundary else payload(stream.stream_id, step.message_id),
                message_id=step.message_id,
                event_time=None if step.boundary else time.time_ns() // 1000,
                boundary=step.boundary,
                eos=step.last,
            )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m demo.producer",
        description="One demo producer: send a deterministic workload, exit once all is acked.",
    )
    p.add_argument("--url", required=True, help="aqueduct://HOST:PORT or tcp://HOST:PORT")
    p.add_argument("--cafile", help="CA certificate that signed the bridge's (QUIC)")
    add_secret_options(p, COOKIE_ENV, "the bridge's cookie")
    p.add_argument("--index", type=int, required=True, help="which producer this is (0-based)")
    p.add_argument("--producers", type=int, required=True)
    p.add_argument("--streams", type=int, required=True, help="streams per producer")
    p.add_argument("--events", type=int, required=True, help="data messages per producer")
    p.add_argument("--epoch", type=int, required=True, help="data messages per epoch")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the acks")
    args = p.parse_args(argv)
    workload = Workload(args.producers, args.streams, args.events, args.epoch)
    stats = asyncio.run(
        produce(
            args.url,
            workload,
            args.index,
            cafile=args.cafile,
            cookie=read_secret(args, COOKIE_ENV),
            timeout=args.timeout,
        )
    )
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
