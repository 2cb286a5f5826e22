"""The demo's deterministic workload: which streams and messages each producer sends.

Producer processes and the verifier derive everything from the same few
numbers, so the verifier knows exactly which rows must reach the sink
without the producers reporting anything back.

Stream ``s`` of producer ``p`` has id ``1000 * (p + 1) + s``. Each stream
sends its share of the producer's events as data messages with consecutive
ids from 0, a BOUNDARY after every ``epoch`` data messages (boundaries take
an id too: ids of a resumable stream strictly increase), and ends with a
BOUNDARY carrying EOS so the last epoch is closed and reaches Spark.
"""

from __future__ import annotations

from dataclasses import dataclass

STREAM_ID_STRIDE = 1000


@dataclass(frozen=True, slots=True)
class Step:
    """One message to send: its id, and whether it is a BOUNDARY (and the stream's last)."""

    message_id: int
    boundary: bool
    last: bool = False


@dataclass(frozen=True, slots=True)
class Workload:
    """Shape of the demo traffic; every derived quantity is a method."""

    producers: int
    streams: int
    events: int  # data messages per producer
    epoch: int  # data messages per epoch

    def stream_ids(self, producer: int) -> list[int]:
        return [STREAM_ID_STRIDE * (producer + 1) + s for s in range(self.streams)]

    def stream_name(self, stream_id: int) -> str:
        producer, s = divmod(stream_id, STREAM_ID_STRIDE)
        return f"demo/p{producer - 1}/s{s}"

    def events_of(self, stream_index: int) -> int:
        """Data messages of the ``stream_index``-th stream of a producer (shares differ by <= 1)."""
        base, extra = divmod(self.events, self.streams)
        return base + (1 if stream_index < extra else 0)

    def steps(self, stream_index: int) -> list[Step]:
        """Every message of one stream, in send order."""
        steps: list[Step] = []
        mid = 0
        n = self.events_of(stream_index)
        for i in range(n):
            steps.append(Step(mid, boundary=False))
            mid += 1
            if (i + 1) % self.epoch == 0 and i + 1 < n:
                steps.append(Step(mid, boundary=True))
                mid += 1
        steps.append(Step(mid, boundary=True, last=True))
        return steps

    def expected(self) -> dict[int, dict[int, bytes]]:
        """Stream id -> {id: payload} of the data messages the sink must hold (boundaries are not rows)."""
        return {
            sid: {s.message_id: payload(sid, s.message_id) for s in self.steps(i) if not s.boundary}
            for p in range(self.producers)
            for i, sid in enumerate(self.stream_ids(p))
        }

    @property
    def total(self) -> int:
        """Data messages of all producers."""
        return self.producers * self.events

    @property
    def records(self) -> int:
        """Log records of all producers: data messages plus boundaries."""
        return self.producers * sum(len(self.steps(i)) for i in range(self.streams))


def payload(stream_id: int, message_id: int, size: int = 64) -> bytes:
    """A recognisable payload padded to ``size`` bytes."""
    return f"stream {stream_id} message {message_id} ".encode().ljust(size, b".")
