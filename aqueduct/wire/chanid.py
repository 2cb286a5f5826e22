"""Channel ids (spec section 2): a varint bit field.

Low to high: bit 0 CREATOR, bit 1 SENDER (the side holding the sender half),
bit 2 ONESHOT, bits 3..63 INDEX. Packing the owner into the id lets both
sides allocate ids without coordination: each (CREATOR, SENDER, ONESHOT)
space is counted up by its creator alone.
"""

from __future__ import annotations

from enum import IntEnum

from aqueduct.wire.errors import WireError

ENTRYPOINT = 0
"""The entrypoint channel: client-created, client-sending, multishot, index 0."""

_MAX_INDEX = (1 << 61) - 1


class Side(IntEnum):
    """One end of a connection, as encoded in chanid bits."""

    CLIENT = 0
    SERVER = 1


def make_chanid(creator: Side, sender: Side, oneshot: bool, index: int) -> int:
    """Pack the four fields; ``index`` must fit in 61 bits."""
    if not 0 <= index <= _MAX_INDEX:
        raise WireError(f"chanid: index {index} is outside 0..2^61-1")
    return (index << 3) | (4 if oneshot else 0) | (int(sender) << 1) | int(creator)


_SIDES = (Side.CLIENT, Side.SERVER)  # indexed by the bit: cheaper than Side(bit) per frame


def chanid_creator(c: int) -> Side:
    """The side that created the channel (and owns its index space)."""
    return _SIDES[c & 1]


def chanid_sender(c: int) -> Side:
    """The side that holds the channel's sender half."""
    return _SIDES[(c >> 1) & 1]


def chanid_oneshot(c: int) -> bool:
    """Whether the channel carries at most one message."""
    return bool(c & 4)


def chanid_index(c: int) -> int:
    """Position of the channel within its (creator, sender, oneshot) space."""
    return c >> 3


def chanid_space(c: int) -> int:
    """The (CREATOR, SENDER, ONESHOT) bits: the index space the channel was counted in."""
    return c & 7
