"""Lost-in-transit tracking (spec section 5): which channels we created are accessible.

Rule: the entrypoint is accessible. A channel is accessible once the message
that attached it is acked *and* was sent on an accessible channel; it is lost
once that message is nacked *or* was sent on a lost channel.

Only the side that sent the attaching message can decide, so this tracker
lives on every side for the channels *it* attached. Per sender channel it
keeps the children of each un-acked message number that carried
attachments, and (while that sender's own status is still pending) the
children of acked messages. Messages without attachments cost nothing here,
so the bookkeeping is O(attachments), not O(messages).

The tracker only decides; the connection destroys state, resets streams,
sends FORGET_CHANNEL and emits ``ChannelLost`` for every chanid the
``lost``-returning methods report.
"""

from __future__ import annotations

from enum import Enum


class Status(Enum):
    PENDING = "pending"
    ACCESSIBLE = "accessible"


class _Node:
    """What we know about one channel: its status and the children it carries."""

    __slots__ = ("status", "unacked", "acked_children")

    def __init__(self, status: Status) -> None:
        self.status = status
        # message key -> chanids attached to that (not yet acked or nacked) message
        self.unacked: dict[int, tuple[int, ...]] = {}
        # children of acked messages, resolved when this channel's own status is
        self.acked_children: list[int] = []


def message_key(num: int, unreliable: bool) -> int:
    """Reliable and unreliable numbers are separate spaces: interleave them in one int."""
    return (num << 1) | unreliable


class TransitTracker:
    """Accessible / pending / lost status of channels, with the transitive cascade."""

    def __init__(self) -> None:
        self._nodes: dict[int, _Node] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    def status(self, chanid: int) -> Status:
        """Status of ``chanid``; untracked channels (entrypoint, remote-created, settled) are accessible.

        Lost channels are destroyed by the connection, so they never ask.
        """
        node = self._nodes.get(chanid)
        return node.status if node is not None else Status.ACCESSIBLE

    def created(self, chanid: int) -> None:
        """A channel we created: pending until the message carrying it resolves."""
        self._nodes[chanid] = _Node(Status.PENDING)

    def attached(self, parent: int, key: int, children: tuple[int, ...]) -> None:
        """Message ``key`` of sender ``parent`` left carrying ``children``."""
        node = self._nodes.get(parent)
        if node is None:
            node = self._nodes[parent] = _Node(Status.ACCESSIBLE)
        node.unacked[key] = children

    def has_unacked(self, parent: int) -> bool:
        node = self._nodes.get(parent)
        return node is not None and bool(node.unacked)

    def unacked_keys(self, parent: int) -> list[int]:
        node = self._nodes.get(parent)
        return list(node.unacked) if node is not None else []

    def acked(self, parent: int, key: int) -> None:
        """Message ``key`` of ``parent`` was acked."""
        node = self._nodes.get(parent)
        if node is None:
            return
        children = node.unacked.pop(key, None)
        if children is None:
            return
        if node.status is Status.ACCESSIBLE:
            for child in children:
                self._accessible(child)
        elif node.status is Status.PENDING:
            node.acked_children.extend(children)
        self._maybe_drop(parent)

    def nacked(self, parent: int, key: int) -> list[int]:
        """Message ``key`` of ``parent`` was nacked: its children are lost. Returns all lost chanids."""
        node = self._nodes.get(parent)
        if node is None:
            return []
        children = node.unacked.pop(key, None)
        lost = self._lose(children) if children else []
        self._maybe_drop(parent)
        return lost

    def lose(self, chanid: int) -> list[int]:
        """``chanid`` itself is lost (or was forgotten): returns it and everything it carried."""
        return self._lose((chanid,))

    def freed(self, chanid: int) -> None:
        """The channel's state is gone; keep the node only while its children still depend on it."""
        node = self._nodes.get(chanid)
        if node is not None:
            node.unacked.clear()
            if node.status is not Status.PENDING or not node.acked_children:
                del self._nodes[chanid]

    # ------------------------------------------------------------ internals

    def _accessible(self, chanid: int) -> None:
        stack = [chanid]
        while stack:
            c = stack.pop()
            node = self._nodes.get(c)
            if node is None or node.status is not Status.PENDING:
                continue
            node.status = Status.ACCESSIBLE
            stack.extend(node.acked_children)
            node.acked_children = []
            self._maybe_drop(c)

    def _lose(self, roots: tuple[int, ...]) -> list[int]:
        lost: list[int] = []
        stack = list(roots)
        while stack:
            c = stack.pop()
            node = self._nodes.pop(c, None)
            lost.append(c)
            if node is None:
                continue
            for children in node.unacked.values():
                stack.extend(children)
            stack.extend(node.acked_children)
        return lost

    def _maybe_drop(self, chanid: int) -> None:
        """Forget a node that has nothing left to decide (status settled, no children waiting)."""
        node = self._nodes.get(chanid)
        if node is not None and node.status is Status.ACCESSIBLE and not node.unacked:
            del self._nodes[chanid]
