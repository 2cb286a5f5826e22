"""Sets of non-negative integers as sorted, disjoint, non-adjacent half-open ranges.

Message numbers mostly arrive in order, so a receiver's set is usually one
range plus a few stragglers: ``add`` of the next consecutive number touches
only the last range (O(1)); anything else is a ``bisect`` plus a list splice.
The same structure serves the ack encodings of spec section 4:

* ACK_RELIABLE values are (gap, ack-length) pairs counted from a ``since``
  cursor (the lowest number not yet acked by an earlier ACK_RELIABLE);
* ACK_NACK_UNRELIABLE values are alternating ack, nack lengths covering
  ``[cursor, end)`` contiguously, ack first (a leading 0 = nack first).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from aqueduct.wire.errors import WireError
from aqueduct.wire.frames import check_ack_nack, check_ack_reliable


class RangeSet:
    """A set of non-negative ints stored as ranges ``[starts[i], stops[i])``."""

    __slots__ = ("_starts", "_stops", "_count")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._stops: list[int] = []
        self._count = 0

    def add(self, n: int) -> None:
        """Add one int; O(1) when ``n`` is at or past the end of the last range."""
        self.insert(n)

    def insert(self, n: int) -> bool:
        """Add one int; False if it was already there (a duplicate), without changing anything.

        ``n in rs`` then ``rs.add(n)`` in one step, O(1) for the next number
        in sequence: what a receiver does for every message it gets.
        """
        stops = self._stops
        if stops:
            last = stops[-1]
            if n == last:
                stops[-1] = n + 1
                self._count += 1
                return True
            if n > last:
                self._starts.append(n)
                stops.append(n + 1)
                self._count += 1
                return True
        if n in self:
            return False
        self.add_range(n, n + 1)
        return True

    def add_range(self, start: int, stop: int) -> None:
        """Add ``[start, stop)``, merging with every range it overlaps or touches."""
        if start < 0:
            raise WireError(f"RangeSet holds non-negative ints, got {start}")
        if stop <= start:
            return
        starts, stops = self._starts, self._stops
        if stops and start >= stops[-1]:  # at or past the end: O(1), as ``insert`` (the receiver's case)
            if start == stops[-1]:
                stops[-1] = stop
            else:
                starts.append(start)
                stops.append(stop)
            self._count += stop - start
            return
        i = bisect_left(stops, start)  # first range ending at or after start
        j = bisect_right(starts, stop)  # ranges from i to j-1 overlap or touch
        if i == j:
            starts.insert(i, start)
            stops.insert(i, stop)
            self._count += stop - start
            return
        new_start = min(start, starts[i])
        new_stop = max(stop, stops[j - 1])
        removed = sum(stops[k] - starts[k] for k in range(i, j))
        starts[i:j] = [new_start]
        stops[i:j] = [new_stop]
        self._count += new_stop - new_start - removed

    def __contains__(self, n: object) -> bool:
        i = bisect_right(self._starts, n) - 1  # type: ignore[call-overload]
        return i >= 0 and n < self._stops[i]  # type: ignore[operator]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return zip(self._starts, self._stops, strict=True)

    def __len__(self) -> int:
        """Number of ranges (not of ints: see ``count``)."""
        return len(self._starts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RangeSet):
            return NotImplemented
        return self._starts == other._starts and self._stops == other._stops

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"RangeSet({list(self)})"

    def count(self) -> int:
        """Number of ints held."""
        return self._count

    @property
    def base(self) -> int:
        """End of the contiguous prefix starting at 0 (0 if 0 is missing)."""
        if self._starts and self._starts[0] == 0:
            return self._stops[0]
        return 0

    @property
    def top(self) -> int:
        """One past the largest int held (0 if empty): every int from here on is absent."""
        return self._stops[-1] if self._stops else 0

    def above_base(self) -> list[tuple[int, int]]:
        """The ranges above ``base``: with it, the compact form of the set."""
        skip = 1 if self._starts and self._starts[0] == 0 else 0
        return list(zip(self._starts[skip:], self._stops[skip:], strict=True))

    def min_missing_from(self, n: int) -> int:
        """The smallest int ``>= n`` not in the set."""
        i = bisect_right(self._starts, n) - 1
        if i >= 0 and n < self._stops[i]:
            return self._stops[i]
        return n

    def gaps(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The missing sub-ranges of ``[start, stop)``, in order."""
        out = []
        pos = start
        starts, stops = self._starts, self._stops
        i = max(bisect_right(starts, start) - 1, 0)
        while pos < stop and i < len(starts):
            s, e = starts[i], stops[i]
            if s > pos:
                out.append((pos, min(s, stop)))
            pos = max(pos, e)
            i += 1
        if pos < stop:
            out.append((pos, stop))
        return out

    def to_ack_reliable(self, since: int) -> tuple[int, ...]:
        """ACK_RELIABLE values for the ints ``>= since``; ``()`` if there are none."""
        starts, stops = self._starts, self._stops
        i = bisect_right(stops, since)  # first range ending after since
        values: list[int] = []
        prev = since
        for k in range(i, len(starts)):
            s = max(starts[k], since)
            values.append(s - prev)
            values.append(stops[k] - s)
            prev = stops[k]
        return tuple(values)

    @classmethod
    def from_ack_reliable(cls, since: int, ranges: tuple[int, ...]) -> RangeSet:
        """The ints acked by ACK_RELIABLE values counted from ``since``."""
        check_ack_reliable(ranges)
        rs = cls()
        pos = since
        for k in range(0, len(ranges), 2):
            start = pos + ranges[k]
            pos = start + ranges[k + 1]
            rs._starts.append(start)
            rs._stops.append(pos)
            rs._count += ranges[k + 1]
        return rs


def encode_ack_nack(cursor: int, received: RangeSet, end: int) -> tuple[int, ...]:
    """ACK_NACK_UNRELIABLE values covering ``[cursor, end)``: ack, nack, ack... lengths.

    ``()`` when there is nothing to cover. A leading 0 means the first number is nacked.
    """
    if end <= cursor:
        return ()
    values: list[int] = []
    pos = cursor
    for gap_start, gap_stop in received.gaps(cursor, end):
        values.append(gap_start - pos)  # acked run (0 only in the lead)
        values.append(gap_stop - gap_start)  # nacked run
        pos = gap_stop
    if pos < end:
        values.append(end - pos)
    return tuple(values)


def decode_ack_nack(cursor: int, ranges: tuple[int, ...]) -> tuple[list[range], list[range], int]:
    """Split ACK_NACK_UNRELIABLE values from ``cursor`` into (acked, nacked, new cursor)."""
    check_ack_nack(ranges)
    acked: list[range] = []
    nacked: list[range] = []
    pos = cursor
    for k, length in enumerate(ranges):
        if length:
            (nacked if k & 1 else acked).append(range(pos, pos + length))
            pos += length
    return acked, nacked, pos
