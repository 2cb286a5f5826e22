"""Feed a bridge from plain (non-asyncio) Python, with a delivery report per record.

::

    python examples/blocking_producer.py tcp://127.0.0.1:7447 --count 1000
    python examples/blocking_producer.py aqueduct://bridge:4433 --cafile /var/lib/aqueduct/log/tls/ca.pem

Four threads share one :class:`aqueduct.connector.Producer`, each
writing JSON records to a stream of its own. ``on_delivery`` is told of
every record once Spark committed it downstream (or, with the error, that
it never will be); ``flush`` waits for the rest and says how many are left.
The last line is a JSON summary; the exit status is 1 if a record was not
delivered.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading

from aqueduct.connector import Delivery, Producer

THREADS = 4


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("url", help="tcp://HOST:PORT or aqueduct://HOST:PORT of the bridge")
    p.add_argument("--count", type=int, default=1000, help="records per thread (default: %(default)s)")
    p.add_argument("--cafile", help="the bridge's CA certificate (aqueduct:// only)")
    p.add_argument("--program", default="blocking-example")
    p.add_argument("--instance", default="0")
    p.add_argument("--flush-timeout", type=float, default=60.0, metavar="SECONDS")
    args = p.parse_args()

    lock = threading.Lock()
    delivered = 0
    failed: list[str] = []

    def on_delivery(error: Exception | None, delivery: Delivery) -> None:  # on the producer's thread
        nonlocal delivered
        with lock:
            if error is None:
                delivered += 1
            else:
                failed.append(f"stream {delivery.stream_id} id {delivery.message_id}: {error}")

    with Producer(
        args.url, program=args.program, instance=args.instance, cafile=args.cafile,
        on_delivery=on_delivery, connect_timeout=30.0,
    ) as producer:
        starts = [producer.open_stream(sid, f"example/{sid}") for sid in range(THREADS)]

        def write(stream_id: int, start: int) -> None:
            for n in range(start, args.count):  # a re-run resumes after what the bridge holds
                record = {"thread": stream_id, "n": n}
                producer.produce(stream_id, json.dumps(record).encode(), message_id=n)

        threads = [threading.Thread(target=write, args=(sid, starts[sid])) for sid in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        left = producer.flush(args.flush_timeout)
    summary = {"sent": sum(args.count - s for s in starts), "delivered": delivered, "unacked_after_flush": left,
               "failed": failed[:10]}  # fmt: skip
    print(json.dumps(summary))
    return 1 if failed or left else 0


if __name__ == "__main__":
    sys.exit(main())
