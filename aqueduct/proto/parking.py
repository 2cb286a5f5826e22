"""Events of channels whose handle has not reached the application yet.

Frames may beat the MESSAGE that attaches a channel (spec section 5): a
ROUTE_TO for an unknown remote-created channel creates it at once. Its
messages and its ending are real, but the application has no handle to give
them to until the carrying MESSAGE is delivered, so their events are parked
here and released right after that MESSAGE's ``MessagesReceived``.

A group starts at such a channel (its root). Channels attached to messages
parked in the group join it, so the order of events survives until the
root's carrying MESSAGE arrives. If the root is forgotten first, its handle
can never arrive: the whole group is hidden and nothing of it surfaces.
"""

from __future__ import annotations

from collections.abc import Iterable

from aqueduct.proto.events import Event
from aqueduct.proto.queue import EventQueue


class _Group:
    __slots__ = ("events", "members")

    def __init__(self, root: int) -> None:
        self.events: list[Event] = []
        self.members = [root]


class Parking:
    """Routes channel events either to the application queue or to a parked group."""

    def __init__(self, events: EventQueue) -> None:
        self._events = events
        self._groups: dict[int, _Group] = {}
        self._hidden: set[int] = set()

    def __contains__(self, chanid: int) -> bool:
        return chanid in self._groups

    def park(self, chanid: int) -> None:
        """``chanid`` appeared without a handle: hold its events."""
        self._groups[chanid] = _Group(chanid)

    def passes(self, chanid: int) -> bool:
        """True if ``chanid``'s events go straight to the application queue."""
        if not (self._groups or self._hidden):
            return True
        return chanid not in self._groups and chanid not in self._hidden

    def emit(self, event: Event) -> None:
        """Queue a channel event for the application, or park (or hide) it."""
        if self._groups or self._hidden:
            c = event.chanid
            if c in self._hidden:
                return
            group = self._groups.get(c)
            if group is not None:
                group.events.append(event)
                return
        self._events.append(event)

    def adopt(self, carrier: int, children: Iterable[int]) -> None:
        """The MESSAGE carrying ``children`` was just emitted on ``carrier``."""
        groups = self._groups
        target = groups.get(carrier)
        for c in children:
            group = groups.get(c)
            if target is None:
                if group is not None:  # the handle exists now: release in order
                    for m in group.members:
                        del groups[m]
                    self._events.extend(group.events)
            elif group is None:  # the carrier is parked itself: the child waits with it
                target.members.append(c)
                groups[c] = target
            elif group is not target:
                target.events.extend(group.events)
                target.members.extend(group.members)
                for m in group.members:
                    groups[m] = target

    def forgotten(self, chanid: int) -> bool:
        """FORGET_CHANNEL for ``chanid``; True if its handle can never exist (no event due)."""
        group = self._groups.get(chanid)
        if group is not None and group.members[0] == chanid:
            for m in group.members:
                del self._groups[m]
                self._hidden.add(m)
        hidden = chanid in self._hidden
        self._hidden.discard(chanid)
        return hidden

    def ended(self, chanid: int) -> None:
        """The channel's state is gone; a hidden channel needs no more filtering."""
        self._hidden.discard(chanid)
