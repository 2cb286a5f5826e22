"""The three delivery modes (spec section 4): the one name every layer shares for id ordering.

To a channel's sender a mode says how it delivers (in order, in any order,
or unreliably); to the connector and the log it says whether a stream's ids
arrive in order, so whether a point of reference may skip gaps. Living on
the ground floor, it costs its importers nothing else: the connector and the
log's on-disk format need the enum, not the channel state machine.
"""

from __future__ import annotations

from enum import Enum


class Mode(Enum):
    """Delivery mode of a sender (spec section 4), invisible to the receiver's API."""

    ORDERED = "ordered"
    UNORDERED = "unordered"
    UNRELIABLE = "unreliable"
