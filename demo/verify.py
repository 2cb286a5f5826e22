"""Check a bridge's Parquet output against what the producers sent.

The exactly-once promise, as a user would check it: every message the
producers sent is in the sink once (count, no duplicates, no gaps) with
exactly the payload it was sent with, each stream's rows appear in
message-id order, and no micro-batch holds part of an epoch. Only files
that Spark's sink metadata log committed count (:mod:`demo.sinkfiles`).
The expectation names every payload, not just the ids: right ids carrying
wrong bytes are not exactly once.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from demo.sinkfiles import read_committed

_SHOWN = 5  # examples kept per kind of problem: enough to debug, small enough to print


@dataclass
class Verification:
    """Outcome of :func:`verify_output`; ``ok`` is the verdict."""

    expected: int
    rows: int
    batches: int
    streams: int
    duplicates: int = 0
    missing: int = 0
    unexpected: int = 0
    wrong_payloads: int = 0  # rows of an expected message whose payload is not the one sent
    out_of_order_streams: int = 0
    split_epochs: int = 0
    examples: dict[str, list] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (
            self.rows == self.expected
            and not self.duplicates
            and not self.missing
            and not self.unexpected
            and not self.wrong_payloads
            and not self.out_of_order_streams
            and not self.split_epochs
        )

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}

    def problems(self) -> list[str]:
        """One human sentence per failed check, empty when ``ok``."""
        checks = [
            (self.rows != self.expected, f"{self.rows} rows, expected {self.expected}"),
            (self.duplicates, f"{self.duplicates} duplicate messages"),
            (self.missing, f"{self.missing} messages missing"),
            (self.unexpected, f"{self.unexpected} messages nobody sent"),
            (self.wrong_payloads, f"{self.wrong_payloads} rows with a payload other than the one sent"),
            (self.out_of_order_streams, f"{self.out_of_order_streams} streams out of order"),
            (self.split_epochs, f"{self.split_epochs} epochs split across micro-batches"),
        ]
        return [text for failed, text in checks if failed]


def verify_output(output_dir: str | Path, expected: Mapping[int, Mapping[int, bytes]]) -> Verification:
    """Compare the committed rows with ``expected`` (stream id -> {message id: payload sent})."""
    want = {sid: dict(sent) for sid, sent in expected.items()}
    table = read_committed(output_dir)
    names = ["stream_id", "message_id", "payload", "epoch", "_batch"]
    cols = table.select(names).to_pydict() if table is not None else {name: [] for name in names}
    keys = list(zip(cols["stream_id"], cols["message_id"], strict=True))
    result = Verification(
        expected=sum(len(ids) for ids in want.values()),
        rows=len(keys),
        batches=len({b for b in cols["_batch"] if b is not None}),
        streams=len({sid for sid, _ in keys}),
    )

    counts = Counter(keys)
    dups = sorted(k for k, n in counts.items() if n > 1)
    result.duplicates = sum(counts[k] - 1 for k in dups)
    unexpected = sorted(k for k in counts if k[1] not in want.get(k[0], ()))
    result.unexpected = len(unexpected)
    missing = sorted((sid, mid) for sid, ids in want.items() for mid in ids if (sid, mid) not in counts)
    result.missing = len(missing)
    wrong = sorted(
        (sid, mid)
        for sid, mid, data in zip(cols["stream_id"], cols["message_id"], cols["payload"], strict=True)
        if mid in want.get(sid, {}) and data != want[sid][mid]
    )
    result.wrong_payloads = len(wrong)

    last: dict[int, int] = {}
    disordered: set[int] = set()
    for sid, mid in keys:
        if mid is not None and sid in last and mid <= last[sid]:
            disordered.add(sid)
        if mid is not None:
            last[sid] = mid
    result.out_of_order_streams = len(disordered)

    epoch_batches: dict[tuple[int, int], set[int]] = defaultdict(set)
    for sid, epoch, batch in zip(cols["stream_id"], cols["epoch"], cols["_batch"], strict=True):
        if epoch is not None and batch is not None:
            epoch_batches[(sid, epoch)].add(batch)
    split = sorted(k for k, b in epoch_batches.items() if len(b) > 1)
    result.split_epochs = len(split)

    for name, items in (
        ("duplicates", dups),
        ("missing", missing),
        ("unexpected", unexpected),
        ("wrong_payloads", wrong),
        ("out_of_order_streams", sorted(disordered)),
        ("split_epochs", split),
    ):
        if items:
            result.examples[name] = [list(i) if isinstance(i, tuple) else i for i in items[:_SHOWN]]
    return result
