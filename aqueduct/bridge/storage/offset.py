"""The ``aqueduct`` source's offset: a log position per stream, as Spark stores it.

Like the Kafka source's ``KafkaSourceOffset`` (a position per topic
partition), :class:`SourceOffset` is a position per stream: ``{"<stream
id>": position}`` in Spark's JSON, with ``"<log name>/<stream id>"`` keys
when one query reads several logs. A position is a log offset (record
count, BOUNDARY markers included) at the end of a closed epoch.

Everything that reads or writes such offsets goes through this one type:
the source planning micro-batches (Spark's JSON-decoded dicts), the commit
file it writes for the bridge (:mod:`.commits`), the acked offsets
(:mod:`.acked`), and Spark's checkpoint and query progress read by the
bridge's commit signals. So one rule says what an offset is, and a
malformed one always gets the same error (:class:`OffsetError`).

It lives in the storage room because the commit file, read by the bridge
without pyspark, is made of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["OffsetError", "SourceOffset", "StreamKey", "key_text", "parse_key"]

#: A stream's key in offsets: its id, or (log name, id) when a query reads several logs.
StreamKey = int | tuple[str, int]

_KEY = re.compile(r"(?:([A-Za-z0-9_-]{1,64})/)?([0-9]+)")


#: What a reader without failover says when the checkpoint holds a failover query's offset.
ID_SPACE_MET = (
    "aqueduct source: this checkpoint's offsets are a failover query's (points of reference by stream id, "
    "read across bridges); set failover=true (or the same bridgeList) to go on, or start this query "
    "with a new checkpoint location"
)


class OffsetError(ValueError):
    """An offset that is not ``{"<stream key>": <non-negative integer>, ...}``."""


def key_shape(qualified: bool) -> str:
    """How a stream key is written, for error messages."""
    return "<log name>/<stream id>" if qualified else "<stream id>"


def key_text(key: StreamKey) -> str:
    """``"7"`` or ``"eu/7"``: a stream's key as it appears in Spark's offset JSON."""
    return f"{key[0]}/{key[1]}" if isinstance(key, tuple) else str(key)


def parse_key(text: object, qualified: bool) -> StreamKey:
    """The inverse of :func:`key_text`; ``qualified`` says whether the query reads several logs.

    Raises :class:`OffsetError` (a ``ValueError``) naming the expected shape.
    """
    m = _KEY.fullmatch(text) if isinstance(text, str) else None
    if m is None or (m.group(1) is not None) != qualified:
        raise OffsetError(f'aqueduct offset: keys must be "{key_shape(qualified)}", got {text!r}')
    return (m.group(1), int(m.group(2))) if qualified else int(m.group(2))


@dataclass(frozen=True)
class SourceOffset:
    """Where a query is in each stream it reads: immutable, keys in canonical order.

    ``positions`` is keyed by :data:`StreamKey`; keys are kept sorted
    (numerically, or by log name then id), because Spark compares offsets
    as JSON text, so equal offsets must serialise alike.
    """

    positions: Mapping[StreamKey, int]

    def __post_init__(self) -> None:
        canonical = {k: self.positions[k] for k in sorted(self.positions)}
        object.__setattr__(self, "positions", MappingProxyType(canonical))

    def __hash__(self) -> int:
        return hash(tuple(self.positions.items()))

    def __reduce__(self) -> tuple:
        return SourceOffset, (dict(self.positions),)

    @classmethod
    def parse(cls, offset: str | Mapping[str, object], *, qualified: bool = False) -> SourceOffset:
        """Spark's offset, as JSON text or its decoded dict, checked entry by entry.

        ``qualified``: keys carry the log's name (a query over several logs).
        Anything else (not JSON, not an object, a key of the other shape, a
        position that is not a non-negative integer) raises
        :class:`OffsetError` with the one message of :meth:`_malformed`.
        """
        doc: object = offset
        if isinstance(offset, str):
            try:
                doc = json.loads(offset)
            except ValueError:
                raise cls._malformed(qualified, repr(offset)) from None
        if not isinstance(doc, Mapping):
            raise cls._malformed(qualified, repr(doc))
        positions: dict[StreamKey, int] = {}
        for k, v in doc.items():
            if type(v) is not int or v < 0:  # bool is an int subclass, and no position
                if k == "by_id":
                    raise OffsetError(ID_SPACE_MET)
                raise cls._malformed(qualified, f"{k!r}: {v!r}")
            try:
                positions[parse_key(k, qualified)] = v
            except OffsetError:
                raise cls._malformed(qualified, f"{k!r}: {v!r}") from None
        return cls(positions)

    @staticmethod
    def _malformed(qualified: bool, got: str) -> OffsetError:
        return OffsetError(
            f'aqueduct offset: expected a JSON object {{"{key_shape(qualified)}": <position>, ...}} '
            f"with non-negative integer positions, got {got}"
        )

    def spark(self) -> dict[str, int]:
        """The dict a pyspark data source hands Spark (which stores it as :meth:`json`)."""
        return {key_text(k): v for k, v in self.positions.items()}

    def json(self) -> str:
        """The JSON text Spark writes to the checkpoint for this offset (pyspark's ``json.dumps``)."""
        return json.dumps(self.spark())

    def stream_ids(self) -> dict[int, int]:
        """Positions by plain stream id (an offset of one log, as the bridge reads it)."""
        if any(isinstance(k, tuple) for k in self.positions):
            raise OffsetError(f"aqueduct offset: keys name several logs, expected one log's: {self.json()}")
        return dict(self.positions)  # type: ignore[arg-type]
