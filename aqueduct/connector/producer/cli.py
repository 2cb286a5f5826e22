"""``aqueduct-produce``: send lines or generated messages to a connector worker.

Message ids are positions (line number, or generated sequence number), so a
re-run with the same ``--program``/``--instance`` resumes exactly where the
worker's durable state ends: lines / ids below the OK's point of reference
are skipped, nothing is sent twice and nothing is missed.

A worker that is not there yet is retried with jittered backoff (the
progress lines and the summary's ``retries`` say how often) until it
answers, or until ``--connect-timeout`` if given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import BinaryIO

from aqueduct.connector.outbound import Mode
from aqueduct.connector.producer.client import Connector, ConnectorRefused, ConnectorStream
from aqueduct.runtime.endpoints import BACKENDS, check_backend


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aqueduct-produce",
        description="Send lines from files/stdin, or generated messages, to a connector "
        "worker (aqueduct://host:port or tcp://host:port). Re-running with the same "
        "--program/--instance resumes where the worker's durable state ends.",
    )
    p.add_argument("url", help="aqueduct://host:port or tcp://host:port")
    p.add_argument("files", nargs="*", help="files to send line by line ('-' = stdin, the default)")
    p.add_argument("--program", default="aqueduct-produce", help="connector program name")
    p.add_argument("--instance", default=None, help="connector instance name (default: host name)")
    p.add_argument("--cookie", default="", help="shared secret the worker expects")
    p.add_argument("--cafile", default=None, help="CA certificate to verify an aqueduct:// worker")
    p.add_argument("--quic-backend", choices=BACKENDS, default="aioquic", help="QUIC stack of aqueduct:// connections (default aioquic; picoquic needs the picoquic extra)")
    p.add_argument("--count", type=int, default=None, help="generate this many messages per stream instead of reading lines")
    p.add_argument("--rate", type=float, default=None, help="messages per second in total (default: as fast as credits allow)")
    p.add_argument("--streams", type=int, default=1, help="generated streams, ids 0..N-1 (default 1)")
    p.add_argument("--payload-size", type=int, default=100, help="bytes per generated payload (default 100)")
    p.add_argument("--stream-name", default="produce", help="stream name prefix (default 'produce')")
    p.add_argument("--mode", choices=[m.value for m in Mode], default="ordered", help="stream delivery mode over Aqueduct")
    p.add_argument("--connect-timeout", type=float, default=None, help="give up if no connection within this many seconds (default: retry until the worker answers)")
    p.add_argument("--ack-timeout", type=float, default=60.0, help="seconds to wait for the final acks (default 60)")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout at the end")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p


Records = list[tuple[int, bytes]]
"""(message id, payload) pairs a source hands over together."""

#: generated records handed over per ``send_many`` when no ``--rate`` paces them one by one
BATCH = 64
#: the most a read of a file or stdin takes at once (it returns what is there, up to this)
READ_SIZE = 64 * 1024


async def _generated(stream: ConnectorStream, count: int, size: int) -> AsyncIterator[Records]:
    """The stream's ids from its resume point up to ``count``, ``BATCH`` at a time."""
    for first in range(stream.resume_from, count, BATCH):
        yield [
            (mid, (b"%d:%d " % (stream.stream_id, mid)).ljust(size, b"x"))
            for mid in range(first, min(first + BATCH, count))
        ]


async def _lines(stream: ConnectorStream, files: list[BinaryIO]) -> AsyncIterator[Records]:
    """Lines numbered from 0 across all files, as they arrive; those the worker holds are skipped.

    Each read, in a thread so a slow stdin never stalls the connection,
    takes what the file has ready (a pipe or terminal: what was written so
    far; at most ``READ_SIZE``), and the whole lines in it go out together:
    a line is never held back for more, and a fast input costs one hop to
    the thread per chunk, not per line. A line is its bytes without the
    ``\n`` (or ``\r\n``) that ends it; the last one may lack it.
    """
    loop = asyncio.get_running_loop()
    mid = 0
    for f in files:
        fd, partial = f.fileno(), bytearray()
        while chunk := await loop.run_in_executor(None, os.read, fd, READ_SIZE):
            cut = chunk.rfind(b"\n")
            if cut < 0:  # no line ends in it yet
                partial += chunk
                continue
            lines = (bytes(partial) + chunk[:cut] if partial else chunk[:cut]).split(b"\n")
            partial = bytearray(chunk[cut + 1 :])
            records = [(mid + i, line.removesuffix(b"\r")) for i, line in enumerate(lines)]
            mid += len(lines)
            if records := [r for r in records if r[0] >= stream.resume_from]:
                yield records
        if partial:
            if mid >= stream.resume_from:
                yield [(mid, bytes(partial).removesuffix(b"\r"))]
            mid += 1


def _committed(streams: list[ConnectorStream], start: dict[int, int]) -> int:
    """Messages of this run committed downstream (ACK), never negative.

    Ids are positions, so the count is how far each stream's ACK point got
    past where this run started (the first OK's point). Later OKs must not
    enter it: their points say what is durable, not what is committed.
    """
    return sum(max(0, s.acked - start.get(s.stream_id, 0)) for s in streams)


class _Progress:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.sent = 0
        self.start: dict[int, int] = {}  # stream id -> resume point of the first OK

    async def report(self, conn: Connector, streams: list[ConnectorStream]) -> None:
        """A line a second on stderr; before the first connection, the retries so far."""
        while not self.quiet:
            await asyncio.sleep(1.0)
            stats = conn.stats
            if not stats.connections:
                last = stats.errors[-1] if stats.errors else "no answer yet"
                print(f"connecting to {conn.url}: {stats.retries} retries ({last})", file=sys.stderr)
                continue
            acked = _committed(streams, self.start)
            print(
                f"sent {self.sent} acked {acked} resent {conn.resent} "
                f"connections {stats.connections} retries {stats.retries}",
                file=sys.stderr,
            )


async def _produce(args: argparse.Namespace, files: list[BinaryIO]) -> dict:
    summary: dict = {"sent": 0, "acked": 0, "resumed": 0, "resume_from": {}, "errors": []}
    progress = _Progress(args.quiet)
    conn = Connector(
        args.url,
        program=args.program,
        instance=args.instance,
        cookie=args.cookie,
        cafile=args.cafile,
        connect_timeout=args.connect_timeout,
        quic_backend=args.quic_backend,
    )
    streams: list[ConnectorStream] = []
    reporter = asyncio.get_running_loop().create_task(progress.report(conn, streams))
    try:
        async with conn:
            n = args.streams if args.count is not None else 1
            for i in range(n):
                streams.append(await conn.stream(i, f"{args.stream_name}/{i}", Mode(args.mode)))
            progress.start = {s.stream_id: s.resume_from for s in streams}
            summary["resume_from"] = {str(sid): point for sid, point in progress.start.items()}
            sources = [
                _generated(s, args.count, args.payload_size)
                if args.count is not None
                else _lines(s, files)
                for s in streams
            ]
            await _send_all(streams, sources, args.rate, progress)
            if Mode(args.mode) is not Mode.UNRELIABLE:
                try:
                    await conn.wait_all_acked(args.ack_timeout)
                except TimeoutError:
                    summary["errors"].append(f"not all acked within {args.ack_timeout} s")
            summary["resumed"] = conn.resent
    except ConnectorRefused as exc:
        summary["errors"].append(f"refused: {exc.reason}")
    except (OSError, TimeoutError) as exc:
        summary["errors"].append(f"connection: {exc}")
    finally:
        reporter.cancel()
    summary["sent"] = progress.sent
    summary["acked"] = _committed(streams, progress.start)
    summary["connections"] = conn.stats.connections
    summary["retries"] = conn.stats.retries
    return summary


async def _send_all(
    streams: list[ConnectorStream],
    sources: list[AsyncIterator[Records]],
    rate: float | None,
    progress: _Progress,
) -> None:
    """Round-robin over the streams, what each source hands over in turn (one record at a time under ``rate``)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    live = list(zip(streams, sources, strict=True))
    while live:
        for entry in list(live):
            stream, source = entry
            items = await anext(source, None)
            if items is None:
                live.remove(entry)
                continue
            for part in ([item] for item in items) if rate else (items,):
                await _send_batch(stream, part)
                progress.sent += len(part)
                if rate:
                    delay = start + progress.sent / rate - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)


async def _send_batch(stream: ConnectorStream, items: Records) -> None:
    """Send ``items`` with their ids: as one run when they are the stream's next ids, else one by one."""
    ephemeral = stream.mode is Mode.UNRELIABLE
    ids = [mid for mid, _ in items]
    if not ephemeral and len(items) > 1 and ids == list(range(stream.next_id, stream.next_id + len(ids))):
        # Positions count up by one (lines, generated ids): exactly the ids send_many assigns.
        await stream.send_many([payload for _, payload in items])
        return
    for mid, payload in items:
        await stream.send(payload, message_id=None if ephemeral else mid)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.url.startswith("aqueduct:"):
        try:
            check_backend(args.quic_backend)
        except ValueError as exc:
            parser.error(str(exc))
    names = args.files or ["-"]
    files: list[BinaryIO] = []
    try:
        if args.count is None:
            files = [sys.stdin.buffer if n == "-" else open(n, "rb") for n in names]  # noqa: SIM115
        summary = asyncio.run(_produce(args, files))
    except KeyboardInterrupt:
        return 130
    finally:
        for f in files:
            if f is not sys.stdin.buffer:
                f.close()
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    if not args.quiet:
        print(
            f"sent {summary['sent']} acked {summary['acked']} resent {summary['resumed']} "
            f"retries {summary['retries']}",
            file=sys.stderr,
        )
    for error in summary["errors"]:
        print(f"aqueduct-produce: {error}", file=sys.stderr)
    return 1 if summary["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
