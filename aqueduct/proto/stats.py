"""Counters: plain mutable dataclasses the machines bump, copied out on read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ChannelStats:
    """Per-channel counters (one direction: what this side sent or received on it).

    ``acked``/``nacked`` count message numbers (acks we got as sender, or sent
    as receiver); ``window_stalls`` counts messages that had to wait in the
    local queue; ``evicted`` unreliable messages dropped from a full queue;
    ``late_dropped`` datagrams that arrived after their number was nacked.
    """

    messages_sent: int = 0
    bytes_sent: int = 0
    messages_received: int = 0
    bytes_received: int = 0
    acked: int = 0
    nacked: int = 0
    window_stalls: int = 0
    evicted: int = 0
    late_dropped: int = 0


@dataclass(slots=True)
class ConnectionStats(ChannelStats):
    """Per-connection totals, plus what only the connection sees.

    ``acked``/``nacked`` count acks and nacks we received for our messages;
    ``acks_sent``/``nacks_sent`` those we sent as a receiver.
    """

    acks_sent: int = 0
    nacks_sent: int = 0
    channels_lost: int = 0
    streams_opened: int = 0
    datagrams_sent: int = 0
    datagrams_received: int = 0
    fallback_streams: int = 0
