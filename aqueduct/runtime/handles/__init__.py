"""What users hold: channel handles, the messages they carry, headers and the payload codec.

A handle talks to whatever feeds it (a local pipe, or a connection's driver)
through the delivery protocol of :mod:`.delivery`; nothing here knows QUIC
or the driver. ``aqueduct.runtime`` re-exports the public names.
"""

from __future__ import annotations

from aqueduct.runtime.handles.delivery import Finished
from aqueduct.runtime.handles.handle import Message
from aqueduct.runtime.handles.pairs import channel, oneshot
from aqueduct.runtime.handles.receiver import OneshotReceiver, Receiver
from aqueduct.runtime.handles.sender import OneshotSender, Sender
from aqueduct.wire.modes import Mode

__all__ = [
    "Finished",
    "Message",
    "Mode",
    "OneshotReceiver",
    "OneshotSender",
    "Receiver",
    "Sender",
    "channel",
    "oneshot",
]
