"""The two state machines of spec/connector-wire.md section 2, as tables.

Both sides share them; each side's session only decides which frames it may
receive. Keeping the transitions as data (rather than scattered ``if``s)
makes the legal paths reviewable at a glance and testable exhaustively.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TypeVar


class ConnectionState(Enum):
    """Connection lifecycle: connected -> handshake -> streaming, or error / disconnected."""

    CONNECTED = "connected"
    HANDSHAKE = "handshake"
    STREAMING = "streaming"
    ERROR = "error"
    DISCONNECTED = "disconnected"


class StreamState(Enum):
    """Per-stream lifecycle within a session: start -> open -> closed -> terminated."""

    START = "start"
    OPEN = "open"
    CLOSED = "closed"
    TERMINATED = "terminated"


C = ConnectionState
S = StreamState

#: (state, what happened) -> next state. ``hello``: HELLO sent or received;
#: ``ok``: OK sent or received; ``error``: ERROR sent or received;
#: ``restart``: RESTART sent or received; ``closed``: the transport ended.
CONNECTION_TRANSITIONS: dict[tuple[ConnectionState, str], ConnectionState] = {
    (C.CONNECTED, "hello"): C.HANDSHAKE,
    (C.HANDSHAKE, "ok"): C.STREAMING,
    (C.CONNECTED, "error"): C.ERROR,
    (C.HANDSHAKE, "error"): C.ERROR,
    (C.STREAMING, "error"): C.ERROR,
    (C.STREAMING, "restart"): C.DISCONNECTED,
    (C.CONNECTED, "closed"): C.DISCONNECTED,
    (C.HANDSHAKE, "closed"): C.DISCONNECTED,
    (C.STREAMING, "closed"): C.DISCONNECTED,
    (C.ERROR, "closed"): C.DISCONNECTED,
}

#: (state, what happened) -> next state. ``notify``: NOTIFY; ``message``: a
#: MESSAGE without EOS; ``eos``: a MESSAGE with EOS; ``restart``: RESTART.
STREAM_TRANSITIONS: dict[tuple[StreamState, str], StreamState] = {
    (S.START, "notify"): S.OPEN,
    (S.OPEN, "notify"): S.OPEN,
    (S.CLOSED, "notify"): S.OPEN,
    (S.OPEN, "message"): S.OPEN,
    (S.OPEN, "eos"): S.CLOSED,
    (S.START, "restart"): S.TERMINATED,
    (S.OPEN, "restart"): S.TERMINATED,
    (S.CLOSED, "restart"): S.TERMINATED,
}


class IllegalTransition(Exception):
    """Raised by :func:`step` when the tables have no entry; callers turn it into an ERROR."""


E = TypeVar("E", ConnectionState, StreamState)


def step(table: Mapping[tuple[E, str], E], state: E, what: str) -> E:
    """Look up the next state or raise :class:`IllegalTransition`."""
    try:
        return table[(state, what)]
    except KeyError:
        raise IllegalTransition(f"{what} not allowed in state {state.value}") from None
