"""The contract between the sans-IO core (:mod:`aqueduct.proto`) and the runtime.

The runtime feeds transport input into ``proto.connection.ConnectionMachine`` and the
application's requests; the connection answers with two queues, drained by
the runtime after every call:

* ``ConnectionMachine.transmit() -> list[Action]``: what to do on the QUIC
  connection (stream bytes, resets, datagrams, close).
* ``ConnectionMachine.next_event() -> Event | None``: what to tell the application.

Names are past tense (aioquic style): they report what *happened*. Like
aioquic's, they are plain (not frozen) slotted dataclasses: several are
built per message, and a frozen dataclass's ``__init__`` costs about four
times as much. Nothing mutates one after it is built.
Stream ids are QUIC stream ids chosen by the core itself (unidirectional
streams only: client 2, 6, 10, ...; server 3, 7, 11, ...), so the runtime
never allocates ids and tests are deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Headers = tuple[tuple[str, bytes], ...]


# ---------------------------------------------------------------- actions


@dataclass(slots=True)
class StreamDataQueued:
    """Bytes to write on a unidirectional stream; ``end_stream`` sends FIN."""

    stream_id: int
    data: bytes
    end_stream: bool = False


@dataclass(slots=True)
class StreamResetQueued:
    """Reset a stream we opened (1 = cancelled, 2 = lost)."""

    stream_id: int
    error_code: int


@dataclass(slots=True)
class DatagramQueued:
    """One QUIC datagram to send."""

    data: bytes


@dataclass(slots=True)
class ConnectionCloseQueued:
    """Close the QUIC connection (1 = protocol violation, 2 = application close)."""

    error_code: int
    reason: str


Action = StreamDataQueued | StreamResetQueued | DatagramQueued | ConnectionCloseQueued


# ---------------------------------------------------------------- events


@dataclass(slots=True)
class Attachment:
    """A channel attached to a received message, as the receiving side sees it."""

    chanid: int
    headers: Headers = ()


@dataclass(slots=True)
class HandshakeCompleted:
    """The peer's CONNECTION_HEADERS arrived; routed frames flow from now on."""

    peer_headers: Headers


@dataclass(slots=True)
class MessagesReceived:
    """Messages, in order, that the application may dequeue from the receiver of ``chanid``.

    The one event of every delivery. ``payloads[i]`` costs ``costs[i]``
    (its encoded frame length): the runtime reports each consumed message
    with ``ConnectionMachine.dequeued(chanid, costs[i])`` (summing is fine), which
    drives DEQUEUED credit and tells the core which messages (and attached
    channels) the application has taken.

    Plain messages (no headers, no attachments) come as runs: consecutive
    numbers of an ORDERED stream's chunks, datagrams received back to back,
    gathered by the event queue (:mod:`.queue`) so the runtime's cost is per
    run, not per message. A message with ``headers`` or ``attachments`` is a
    run of one, and they are that message's.
    """

    chanid: int
    payloads: list[bytes]
    costs: list[int]
    headers: Headers = ()
    attachments: tuple[Attachment, ...] = ()


@dataclass(slots=True)
class ChannelFinished:
    """``chanid`` finished: as receiver, every message was delivered and the sender finished;
    as sender, the receiver confirmed our FINISH_SENDER (its CLOSE_RECEIVER arrived)."""

    chanid: int


@dataclass(slots=True)
class ChannelCancelled:
    """The remote sender cancelled ``chanid``; undelivered messages were dropped."""

    chanid: int


@dataclass(slots=True)
class ReceiverWasClosed:
    """The remote receiver of our sender ``chanid`` closed it."""

    chanid: int


@dataclass(slots=True)
class ChannelLost:
    """``chanid`` became lost in transit; every local handle must fail (LostInTransit).

    Also reported for a channel whose state had already ended, so a handle
    still waiting on it learns the loss; unknown chanids can be ignored.
    """

    chanid: int


@dataclass(slots=True)
class SendWindowOpened:
    """Queued messages of sender ``chanid`` drained; a blocked ``send()`` may continue."""

    chanid: int


@dataclass(slots=True)
class MessagesAcked:
    """The peer acked or nacked messages of sender ``chanid`` (for counters and waiters)."""

    chanid: int
    acked: int = 0
    nacked: int = 0


@dataclass(slots=True)
class ConnectionTerminated:
    """The connection ended; ``error_code`` 1 = protocol violation, 2 = application close."""

    error_code: int
    reason: str
    by_peer: bool = field(default=True)


Event = (
    HandshakeCompleted
    | MessagesReceived
    | ChannelFinished
    | ChannelCancelled
    | ReceiverWasClosed
    | ChannelLost
    | SendWindowOpened
    | MessagesAcked
    | ConnectionTerminated
)
