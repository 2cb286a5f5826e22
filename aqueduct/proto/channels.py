"""The channel table of one connection: live channels, the ids it allocates, and tombstones.

Spec section 2: each side counts the channels it creates in its own
(CREATOR, SENDER, ONESHOT) index spaces, so ids need no coordination. Ended
channels leave tombstones, because frames for them may still arrive and
must be told apart from frames for a channel that never existed:

* **destroyed**: remote-created channels that are gone (ended, forgotten,
  lost); a ROUTE_TO for one is ignored rather than creating it again;
* **closed locally**: channels we created that ended normally; a ROUTE_TO
  for one needs no FORGET_CHANNEL;
* **sender ended**: channels that got FINISH_SENDER or CANCEL_SENDER; a
  second one is a violation even after the state is gone.

Tombstones are per index space range sets of indices: a connection that
opens and ends millions of channels in order keeps a few ranges, not a
set of millions.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import MappingProxyType
from typing import TYPE_CHECKING

from aqueduct.wire.chanid import Side, chanid_creator, chanid_index, chanid_space, make_chanid
from aqueduct.wire.rangeset import RangeSet

if TYPE_CHECKING:
    from aqueduct.proto.receiver import ReceiverChannel
    from aqueduct.proto.sender import SenderChannel

    Channel = SenderChannel | ReceiverChannel


class _Tombstones:
    """Indices of ended channels, per index space."""

    __slots__ = ("_spaces",)

    def __init__(self) -> None:
        self._spaces: dict[int, RangeSet] = {}

    def add(self, chanid: int) -> None:
        space = chanid_space(chanid)
        ids = self._spaces.get(space)
        if ids is None:
            ids = self._spaces[space] = RangeSet()
        ids.add(chanid_index(chanid))

    def __contains__(self, chanid: int) -> bool:
        ids = self._spaces.get(chanid_space(chanid))
        return ids is not None and chanid_index(chanid) in ids


class ChannelTable:
    """Owns the ids, the lookup and the tombstones of one connection's channels."""

    __slots__ = ("side", "live", "destroyed", "closed_locally", "sender_ended", "_next_index")

    def __init__(self, side: Side) -> None:
        self.side = side
        #: chanid -> state of every live channel. Read directly on the hot path;
        #: changed only through :meth:`add` and :meth:`pop`.
        self.live: dict[int, Channel] = {}
        self.destroyed = _Tombstones()
        self.closed_locally = _Tombstones()
        self.sender_ended = _Tombstones()
        self._next_index: dict[int, int] = {}

    def view(self) -> MappingProxyType[int, Channel]:
        return MappingProxyType(self.live)

    def __len__(self) -> int:
        return len(self.live)

    def __iter__(self) -> Iterator[Channel]:
        return iter(self.live.values())

    def allocate(self, sender_side: Side, oneshot: bool) -> int:
        """The next chanid this side creates in that (SENDER, ONESHOT) space."""
        space = make_chanid(self.side, sender_side, oneshot, 0)
        index = self._next_index.get(space, 0)
        self._next_index[space] = index + 1
        return make_chanid(self.side, sender_side, oneshot, index)

    def reserve(self, chanid: int) -> None:
        """``chanid`` exists from the start (the entrypoint): allocation goes past it."""
        space = chanid_space(chanid)
        self._next_index[space] = max(self._next_index.get(space, 0), chanid_index(chanid) + 1)

    def add(self, ch: Channel) -> Channel:
        self.live[ch.chanid] = ch
        return ch

    def pop(self, chanid: int) -> Channel | None:
        return self.live.pop(chanid, None)

    def ended(self, chanid: int) -> None:
        """A channel ended normally: tombstone it in the table its creator decides."""
        if chanid_creator(chanid) == self.side:
            self.closed_locally.add(chanid)
        else:
            self.destroyed.add(chanid)
