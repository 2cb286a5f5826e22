"""Errors of the Aqueduct protocol layer.

They name their side (DESIGN.md): a ``LocalProtocolError`` means *we* were
asked to do something the protocol forbids; a ``RemoteProtocolError`` means
the peer broke a rule (the connection is then closed with code 1). Channel
outcomes are separate exceptions because applications handle them, not bugs.
``Finished`` is not an error: it is the end of ``async for``.
"""

from __future__ import annotations


class AqueductError(Exception):
    """Base of every error this package raises on purpose."""


class LocalProtocolError(AqueductError):
    """The application asked for something the protocol forbids (e.g. attaching a handle twice)."""


class RemoteProtocolError(AqueductError):
    """The peer violated the protocol; ``reason`` names the frame and the rule."""

    def __init__(self, reason: str, code: int = 1) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


class ChannelOutcome(AqueductError):
    """A channel ended other than by finishing; subclasses say how."""


class Cancelled(ChannelOutcome):
    """The remote sender cancelled the channel; undelivered messages were dropped."""


class ReceiverClosed(ChannelOutcome):
    """The receiver closed the channel; further sends fail."""


class LostInTransit(ChannelOutcome):
    """The message that carried this channel's other half never reached the peer's application."""


class ConnectionLost(ChannelOutcome):
    """The connection under the channel ended before the channel did."""

    def __init__(self, reason: str = "connection lost", code: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code
