"""``python -m bench.flight_read``: an executor's read over Flight vs the local mmap read, same ranges.

A log holds ``--records`` records of ``--size`` bytes over ``--streams``
streams (epochs of ``--epoch`` records, a group commit each). The source
plans one batch read of everything (``minPartitions`` = ``--partitions``)
and every partition is read as an executor reads it
(``AqueductBatchReader.read``: records, BOUNDARY markers dropped, Spark's
columns), first from the log directory (``option("log")``: memory-mapped
segments) and then through a bridge's Flight server on loopback
(``option("bridge")``: TLS, token), alternating, ``--repeat`` times. The
figure is the median throughput of each, in MB of payload per second, and
their ratio (issue 27's target: at least 0.7). Beside them, the
ceiling of Flight itself on this machine: the same stored batches, held in
memory, sent by a bare ``pyarrow.flight`` server (no log, no planning, no
per-slice calls) four ways: one ``DoGet`` over the same TLS, two parallel
``DoGet`` streams, smaller (1,000-record) batches, and no TLS at all: the
profile that says whether streams, message sizes or encryption would
close the gap. Progress goes to stderr; ``--json`` writes the row;
``--quick`` is a smoke run.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def build_log(path: Path, streams: int, records: int, size: int, epoch: int) -> None:
    from aqueduct.bridge.storage.log import DurableLog
    from aqueduct.connector.frames import ConnectorMessage

    payload = b"x" * size
    per_stream = max(1, records // streams)
    with DurableLog(path) as log:
        for sid in range(streams):
            log.open_stream(sid, f"s-{sid}", "bench/1", boundaries=True)
        mid = dict.fromkeys(range(streams), 0)
        for start in range(0, per_stream, epoch):
            for sid in range(streams):
                for _ in range(min(epoch, per_stream - start)):
                    log.append(ConnectorMessage.build(sid, payload, message_id=mid[sid]))
                    mid[sid] += 1
                log.append(ConnectorMessage.build(sid, message_id=mid[sid], boundary=True))
                mid[sid] += 1
            log.commit()


def read_all(options: dict[str, str], partitions: int) -> tuple[float, int, int]:
    """Plan a batch read of everything and read every partition as executors do: (seconds, rows, bytes)."""
    from aqueduct.bridge.source.datasource import SPARK_STRUCT, AqueductDataSource

    reader = AqueductDataSource({**options, "minPartitions": str(partitions)}).reader(SPARK_STRUCT)
    parts = reader.partitions()
    executor = pickle.loads(pickle.dumps(reader))  # what an executor gets
    started = time.perf_counter()
    rows = size = 0
    for p in parts:
        for batch in executor.read(p):
            rows += batch.num_rows
            size += batch.column("payload").nbytes
    return time.perf_counter() - started, rows, size


def flight_ceilings(log: Path, certs: Any, repeat: int) -> tuple[dict[str, float], int]:
    """What Flight itself achieves here with the log's stored batches held in memory (no log, no planning).

    Medians of ``repeat`` reads, in seconds, of: one ``DoGet`` over the
    bridge's TLS (``tls``), the same split over two ``DoGet`` streams read in
    parallel (``tls_2_streams``), one ``DoGet`` re-chunked into batches of
    1,000 records (``tls_small_batches``), and one ``DoGet`` without TLS
    (``plaintext``); and the payload bytes each moves.
    """
    import threading

    import pyarrow as pa
    import pyarrow.flight as flight

    from aqueduct.bridge.storage.schema import STORED_SCHEMA
    from aqueduct.bridge.storage.view import load_streams

    stored = pa.Table.from_batches(
        [b for s in load_streams(log).values() for b in s.read(s.earliest, s.end)], STORED_SCHEMA
    )
    small = pa.Table.from_batches(stored.to_batches(max_chunksize=1_000), STORED_SCHEMA)
    half = (stored.num_rows + 1) // 2

    class Bare(flight.FlightServerBase):
        def do_get(self, context: Any, ticket: Any) -> Any:
            which = ticket.ticket
            table = small if which == b"small" else stored
            if which.startswith(b"half"):
                table = stored.slice(half * int(which[4:]), half)
            return flight.RecordBatchStream(table)

    def read(client: Any, tickets: list[bytes]) -> float:
        threads = [threading.Thread(target=lambda t=t: client.do_get(flight.Ticket(t)).read_all()) for t in tickets]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - started

    tls = [flight.CertKeyPair(certs.server_cert.read_bytes(), certs.server_key.read_bytes())]
    secure = Bare(flight.Location.for_grpc_tls("127.0.0.1", 0), tls_certificates=tls)
    plain = Bare(flight.Location.for_grpc_tcp("127.0.0.1", 0))
    clients = {
        "tls": flight.FlightClient(f"grpc+tls://127.0.0.1:{secure.port}", tls_root_certs=certs.ca.read_bytes()),
        "plaintext": flight.FlightClient(f"grpc+tcp://127.0.0.1:{plain.port}"),
    }
    ways = {"tls": ("tls", [b"all"]), "tls_2_streams": ("tls", [b"half0", b"half1"]),
            "tls_small_batches": ("tls", [b"small"]), "plaintext": ("plaintext", [b"all"])}  # fmt: skip
    times: dict[str, list[float]] = {w: [] for w in ways}
    try:
        for _ in range(repeat):
            for way, (client, tickets) in ways.items():
                times[way].append(read(clients[client], tickets))
    finally:
        for c in clients.values():
            c.close()
        secure.shutdown()
        plain.shutdown()
    return {w: statistics.median(t) for w, t in times.items()}, stored.column("payload").nbytes


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from aqueduct.bridge.network.flight_server import load_or_create_token, start_flight_server
    from aqueduct.runtime.certs import generate_certs

    with tempfile.TemporaryDirectory(prefix="aq-flight-bench-") as tmp:
        log = Path(tmp) / "log"
        build_log(log, args.streams, args.records, args.size, args.epoch)
        certs = generate_certs(Path(tmp) / "tls")
        token_file = Path(tmp) / "tls" / "flight.token"
        server = start_flight_server(
            log, "127.0.0.1", 0, token=load_or_create_token(token_file),
            certfile=certs.server_cert, keyfile=certs.server_key,
        )  # fmt: skip
        try:
            ways = {
                "local": {"log": str(log)},
                "flight": {"bridge": f"127.0.0.1:{server.port}", "bridgeTokenFile": str(token_file),
                           "bridgeCA": str(certs.ca)},
            }  # fmt: skip
            times: dict[str, list[float]] = {w: [] for w in ways}
            read: dict[str, tuple[int, int]] = {}
            for i in range(args.repeat):
                for way, options in ways.items():
                    seconds, rows, size = read_all(options, args.partitions)
                    times[way].append(seconds)
                    read[way] = (rows, size)
                    print(f"flight_read: run {i + 1}/{args.repeat} {way}: {size / seconds / 1e6:,.0f} MB/s",
                          file=sys.stderr, flush=True)  # fmt: skip
            ceilings, ceiling_bytes = flight_ceilings(log, certs, args.repeat)
        finally:
            server.shutdown()
    assert read["local"] == read["flight"], f"the two reads differ: {read}"
    rows, size = read["local"]
    local, flight = statistics.median(times["local"]), statistics.median(times["flight"])
    return {
        "records": rows, "payload_bytes": size, "streams": args.streams, "partitions": args.partitions,
        "local_s": round(local, 4), "flight_s": round(flight, 4),
        "local_mb_s": round(size / local / 1e6, 1), "flight_mb_s": round(size / flight / 1e6, 1),
        "ratio": round(local / flight, 3), "target": 0.7,
        "bare_flight": {way: {"mb_s": round(ceiling_bytes / s / 1e6, 1),
                              "ratio": round(local / s * ceiling_bytes / size, 3)} for way, s in ceilings.items()},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.flight_read", description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=400_000, help="records in the log (default: %(default)s)")
    p.add_argument("--size", type=int, default=256, help="payload bytes per record (default: %(default)s)")
    p.add_argument("--streams", type=int, default=8, help="streams (default: %(default)s)")
    p.add_argument("--epoch", type=int, default=5_000, help="records per epoch and commit (default: %(default)s)")
    p.add_argument("--partitions", type=int, default=8, help="minPartitions of the read (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=5, help="runs of each read; medians (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="100,000 records, 3 runs: a smoke run")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the result row here")
    args = p.parse_args(argv)
    if args.quick:
        args.records, args.repeat = 100_000, 3
    row = measure(args)
    print(
        f"flight_read: {row['records']:,} records, {row['payload_bytes'] / 1e6:,.0f} MB: local "
        f"{row['local_mb_s']:,} MB/s, Flight {row['flight_mb_s']:,} MB/s, ratio {row['ratio']} "
        f"(target >= {row['target']}); a bare Flight server sending the same batches from memory: "
        + ", ".join(f"{way} {r['mb_s']:,} MB/s (ratio {r['ratio']})" for way, r in row["bare_flight"].items())
    )
    if args.json:
        args.json.write_text(json.dumps(row, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
