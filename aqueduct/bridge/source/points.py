"""A failover query's offset: a point of reference per stream id, ``{"by_id": {"<stream id>": P}}``.

A per-log offset (:class:`~aqueduct.bridge.storage.offset.SourceOffset`,
``{"<stream id>": log offset}``) names positions in one bridge's log; a
failover query reads a stream from whichever bridge holds it, so its
offset names points of reference (the producer's ids), the same on every
bridge. The two shapes cannot be taken for each other: the failover one
is an object under the single key ``by_id``, which no per-log offset has,
and each reader refuses the other's with one line saying what to do.
Keys are sorted numerically, because Spark compares offsets as JSON text.
"""

from __future__ import annotations

from collections.abc import Mapping

from aqueduct.bridge.source.id_space import BEFORE_ALL
from aqueduct.bridge.storage.offset import OffsetError

__all__ = ["BY_ID", "PER_LOG_MET", "parse_points", "spark_points"]

BY_ID = "by_id"

#: What a failover reader says when the checkpoint holds a per-log offset.
PER_LOG_MET = (
    "aqueduct source: this checkpoint's offsets name positions in one bridge's log (written without "
    "failover); a failover query needs its own checkpoint location (start it anew, with startingOffsets "
    "if it must not read from the earliest records), or set failover=false to go on as before"
)


def spark_points(points: Mapping[int, int]) -> dict[str, dict[str, int]]:
    """The offset dict Spark stores for ``points`` (stream id -> point), keys in numeric order."""
    return {BY_ID: {str(sid): points[sid] for sid in sorted(points)}}


def parse_points(offset: Mapping[str, object]) -> dict[int, int]:
    """Points by stream id from Spark's offset dict; a per-log offset gets :data:`PER_LOG_MET`."""
    if set(offset) != {BY_ID} or not isinstance(offset[BY_ID], Mapping):
        if offset and BY_ID not in offset:
            raise OffsetError(PER_LOG_MET)
        raise OffsetError(
            f'aqueduct offset: expected {{"{BY_ID}": {{"<stream id>": <point>, ...}}}}, got {offset!r}'
        )
    points: dict[int, int] = {}
    for k, v in offset[BY_ID].items():  # type: ignore[union-attr]
        if not (isinstance(k, str) and k.isdigit()) or type(v) is not int or v < BEFORE_ALL:
            raise OffsetError(
                f'aqueduct offset: expected "<stream id>": <point> (an integer >= -1), got {k!r}: {v!r}'
            )
        points[int(k)] = v
    return points
