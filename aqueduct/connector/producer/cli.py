"""``aqueduct-produce``: send lines or generated messages to a connector worker.

Message ids are positions (line number, or generated sequence number), so a
re-run with the same ``--program``/``--instance`` resumes exactly where the
worker's durable state ends: lines / ids below the OK's point of reference
are skipped, nothing is sent twice and nothing is missed.

A worker that is not there yet is retried with jittered backoff (the
progress lines and the summary's ``retries`` say how often) until it
answers, or until ``--connect-timeout`` if given. Given several bridges
(``URL,URL,...``), it moves to the next when its own was lost or could not
be reached for ``--move-after`` seconds (the summary's ``moves``, and
``bridge``, the one it ended on); ``--replicas 2`` sends every stream to
two of them at once (``serving``: the bridge of each connection).

Stream ids: a stream belongs to the connector (program/instance) that
first sent on it, so two producers must not share ids. By default each
stream's id is derived from the program, the instance and the stream's
name (:func:`derived_stream_id`): a second program, or the same program on
another host, gets ids of its own without anyone handing them out, and a
re-run of the same one gets the same ids back, so it resumes.
``--first-stream-id N`` numbers the streams N, N+1, ... instead, for ids
chosen by hand (e.g. to match a ``streams`` filter of the Spark source).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from typing import BinaryIO

from aqueduct.connector.errors import ConnectorRefused, StreamRefused
from aqueduct.connector.outbound import Mode
from aqueduct.connector.producer.client import DEFAULT_MOVE_AFTER, Connector, ConnectorStream
from aqueduct.connector.producer.pacing import Pacing
from aqueduct.console import (
    COOKIE_ENV,
    UsageError,
    add_secret_options,
    add_version,
    non_negative_int,
    positive_float,
    positive_int,
    read_secret,
    run,
)
from aqueduct.runtime.endpoints import BACKENDS

#: derived stream ids stay below 2**53: exact in JSON numbers (JavaScript) and Spark's long
STREAM_ID_BITS = 53


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aqueduct-produce",
        description="Send lines from files/stdin, or generated messages, to a connector "
        "worker (aqueduct://host:port or tcp://host:port), or to one of several bridges "
        "(URL,URL,...: it moves to the next when its own is lost). Re-running with the same "
        "--program/--instance resumes where the worker's durable state ends.",
    )
    p.add_argument("url", help="aqueduct://host:port or tcp://host:port, or several separated by commas (QUIC and TCP may be mixed)")
    p.add_argument("files", nargs="*", help="files to send line by line ('-' = stdin, the default)")
    p.add_argument("--program", default="aqueduct-produce", help="connector program name")
    p.add_argument("--instance", default=None, help="connector instance name (default: host name)")
    add_secret_options(p, COOKIE_ENV, "the shared secret the worker expects")
    p.add_argument(
        "--token-file", metavar="PATH",
        help=f"a signed producer token (aqueduct token issue) for a bridge that checks tokens, "
        f"instead of the cookie. Or set the environment variable {TOKEN_ENV}",
    )
    p.add_argument("--cafile", default=None, help="CA certificate to verify an aqueduct:// worker")
    p.add_argument("--cert", default=None, metavar="PEM", help="client certificate for a worker that requires one (mutual TLS, aqueduct:// with aioquic)")
    p.add_argument("--key", default=None, metavar="PEM", help="private key of --cert")
    p.add_argument("--quic-backend", choices=BACKENDS, default="aioquic", help="QUIC stack of aqueduct:// connections (default aioquic; picoquic needs the picoquic extra)")
    p.add_argument("--count", type=non_negative_int, default=None, help="generate this many messages per stream instead of reading lines")
    p.add_argument("--rate", type=positive_float, default=None, help="messages per second in total; behind after a pause (a reconnect), it catches up at most twice as fast (default: as fast as credits allow)")
    p.add_argument("--streams", type=positive_int, default=1, help="generated streams (default 1)")
    p.add_argument("--first-stream-id", type=non_negative_int, default=None, metavar="N", help="number the streams N, N+1, ... (default: ids derived from --program, --instance and the stream name, so producers never share one)")
    p.add_argument("--payload-size", type=non_negative_int, default=100, help="bytes per generated payload (default 100)")
    p.add_argument("--stream-name", default="produce", help="stream name prefix: streams are PREFIX/0, PREFIX/1, ... (default 'produce')")
    p.add_argument("--mode", choices=[m.value for m in Mode], default="ordered", help="stream delivery mode over Aqueduct")
    p.add_argument("--move-after", type=positive_float, default=DEFAULT_MOVE_AFTER, metavar="SECONDS", help=f"with several bridges: move to the next once this one was lost or unreachable this long, or refuses as busy (default {DEFAULT_MOVE_AFTER:g}; a connection silent this long counts as lost)")
    p.add_argument("--replicas", type=positive_int, default=1, metavar="N", help="send every stream to N of the bridges at once, each over a connection of its own; a record is done when any of them acks it, so losing one costs no stall (default 1)")
    p.add_argument("--connect-timeout", type=positive_float, default=None, help="give up if no connection within this many seconds (default: retry until the worker answers)")
    p.add_argument("--ack-timeout", type=positive_float, default=60.0, help="seconds to wait for the final acks (default 60)")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout at the end")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_version(p)
    return p


def derived_stream_id(program: str, instance: str, stream_name: str) -> int:
    """A stream id of this connector's own: a hash of program, instance and stream name, below 2**53.

    Distinct connectors' ids collide only by chance (about one pair in
    10**9 among 4,000 streams); the same three names always give the same id,
    which is what resuming needs.
    """
    digest = hashlib.blake2b(f"{program}\0{instance}\0{stream_name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - STREAM_ID_BITS)


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
                print(f"connecting to {conn.bridge}: {stats.retries} retries ({last})", file=sys.stderr)
                continue
            acked = _committed(streams, self.start)
            moves = f" moves {stats.moves} (on {','.join(conn.serving)})" if len(conn.bridges) > 1 else ""
            print(
                f"sent {self.sent} acked {acked} resent {conn.resent} "
                f"connections {stats.connections} retries {stats.retries}{moves}",
                file=sys.stderr,
            )


def _stream_ids(args: argparse.Namespace, instance: str) -> list[tuple[int, str]]:
    """(id, name) of each stream this run sends on (see the module docstring for the ids)."""
    n = args.streams if args.count is not None else 1
    names = [f"{args.stream_name}/{i}" for i in range(n)]
    if args.first_stream_id is not None:
        return [(args.first_stream_id + i, name) for i, name in enumerate(names)]
    return [(derived_stream_id(args.program, instance, name), name) for name in names]


async def _produce(args: argparse.Namespace, conn: Connector, files: list[BinaryIO]) -> dict:
    ids = _stream_ids(args, conn.instance)
    summary: dict = {
        "sent": 0, "acked": 0, "resumed": 0, "resume_from": {}, "refused": None, "errors": [],
        "streams": {str(sid): name for sid, name in ids},
    }  # fmt: skip
    progress = _Progress(args.quiet)
    streams: list[ConnectorStream] = []
    reporter = asyncio.get_running_loop().create_task(progress.report(conn, streams))
    try:
        async with conn:
            for sid, name in ids:
                streams.append(await conn.stream(sid, name, Mode(args.mode)))
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
                except StreamRefused:
                    pass  # the others are all acked; each refused stream is named below
            summary["resumed"] = conn.resent
    except ConnectorRefused as exc:
        summary["refused"] = exc.reason
        summary["errors"].append(f"refused: {exc.reason}")
    except (OSError, TimeoutError) as exc:
        summary["errors"].append(f"connection: {exc}")
    finally:
        reporter.cancel()
    for refusal in conn.refused.values():  # given up alone, the other streams went on
        summary["refused"] = summary["refused"] or refusal.reason
        summary["errors"].append(f"refused: {refusal.reason}")
    summary["sent"] = progress.sent
    summary["acked"] = _committed(streams, progress.start)
    summary["connections"] = conn.stats.connections
    summary["retries"] = conn.stats.retries
    summary["moves"] = conn.stats.moves
    summary["bridge"] = conn.bridge
    summary["serving"] = list(conn.serving)
    return summary


async def _send_all(
    streams: list[ConnectorStream],
    sources: list[AsyncIterator[Records]],
    rate: float | None,
    progress: _Progress,
) -> None:
    """Round-robin over the streams, what each source hands over in turn (one record at a time under ``rate``).

    ``rate`` spaces the records by :class:`~aqueduct.connector.producer.pacing.Pacing`:
    on schedule, and after a pause (a reconnect) a catch-up at a bounded pace.
    """
    loop = asyncio.get_running_loop()
    pacing = Pacing(rate, loop.time()) if rate else None
    live = list(zip(streams, sources, strict=True))
    while live:
        for entry in list(live):
            stream, source = entry
            items = await anext(source, None)
            if items is None:
                live.remove(entry)
                continue
            for part in ([item] for item in items) if pacing else (items,):
                if pacing is not None:
                    if (delay := pacing.wait(loop.time())) > 0:
                        await asyncio.sleep(delay)
                    pacing.sent(loop.time())
                try:
                    await _send_batch(stream, part)
                except StreamRefused:  # that stream alone is given up: the others go on
                    live.remove(entry)
                    break
                progress.sent += len(part)


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


#: the environment variable a producer's token may come from (``--token-file`` wins)
TOKEN_ENV = "AQUEDUCT_TOKEN"


def _token(args: argparse.Namespace) -> str | None:
    """The token of ``--token-file``, else ``$AQUEDUCT_TOKEN``, else None (the cookie admits)."""
    if args.token_file is not None:
        if args.cookie is not None or args.cookie_file is not None:
            raise UsageError("--token-file: give a token or a cookie, not both")
        try:
            with open(args.token_file, encoding="ascii", errors="replace") as f:
                token = f.readline().strip()
        except OSError as exc:
            raise UsageError(f"--token-file: cannot read {args.token_file}: {exc.strerror}") from None
        if not token:
            raise UsageError(f"--token-file: {args.token_file} is empty")
        return token
    if args.cookie is not None or args.cookie_file is not None:
        return None  # a cookie given on purpose wins over a token the environment may hold
    return os.environ.get(TOKEN_ENV, "").strip() or None


def _connector(args: argparse.Namespace) -> Connector:
    """The connector the arguments describe; a URL, backend or certificate it cannot use is a :class:`UsageError`."""
    if (args.cert is None) != (args.key is None):
        raise UsageError("--cert and --key go together")
    if args.cert is not None and args.quic_backend == "picoquic":
        raise UsageError("--cert: the picoquic backend cannot present a client certificate; use aioquic")
    for option, path in (("--cafile", args.cafile), ("--cert", args.cert), ("--key", args.key)):
        if path is not None and not os.path.isfile(path):
            raise UsageError(f"{option} {path}: no such file")
    token = _token(args)
    try:
        return Connector(
            args.url,
            program=args.program,
            instance=args.instance,
            cookie=b"" if token is not None else read_secret(args, COOKIE_ENV),
            token=token,
            cafile=args.cafile,
            certfile=args.cert,
            keyfile=args.key,
            connect_timeout=args.connect_timeout,
            quic_backend=args.quic_backend,
            move_after=args.move_after,
            replicas=args.replicas,
        )
    except ValueError as exc:  # a URL's scheme, host or port (named); a backend that is not installed; replicas
        raise UsageError(str(exc)) from None


def _open_inputs(names: Sequence[str]) -> list[BinaryIO]:
    """The input files ('-' is stdin), all opened before anything is sent: a missing one is a :class:`UsageError`."""
    files: list[BinaryIO] = []
    for name in names:
        try:
            files.append(sys.stdin.buffer if name == "-" else open(name, "rb"))  # noqa: SIM115
        except OSError as exc:
            for f in files:
                if f is not sys.stdin.buffer:
                    f.close()
            raise UsageError(f"cannot read {name}: {exc.strerror}") from None
    return files


def _main(argv: Sequence[str] | None) -> int:
    # Intermixed: files may come after options (``--cert c.pem events.txt``), as the docs show them.
    args = _parser().parse_intermixed_args(argv)
    conn = _connector(args)
    files = _open_inputs(args.files or ["-"]) if args.count is None else []
    try:
        summary = asyncio.run(_produce(args, conn, files))
    finally:
        for f in files:
            if f is not sys.stdin.buffer:
                f.close()
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    if not args.quiet:
        # Refused, what was handed over never reached the log: "sent" would be a claim.
        done = "refused after handing over" if summary["refused"] is not None else "sent"
        print(
            f"{done} {summary['sent']} acked {summary['acked']} resent {summary['resumed']} "
            f"retries {summary['retries']}" + (f" moves {summary['moves']}" if len(conn.bridges) > 1 else ""),
            file=sys.stderr,
        )
    for error in summary["errors"]:
        print(f"aqueduct-produce: {error}", file=sys.stderr)
    return 1 if summary["errors"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``aqueduct-produce``; returns the exit status (2 for bad input, one line on stderr)."""
    return run("aqueduct-produce", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
