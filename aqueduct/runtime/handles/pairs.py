"""Where handles come from: a local pair (:func:`channel`, :func:`oneshot`), or a connection."""

from __future__ import annotations

from typing import Any

from aqueduct.runtime.handles.handle import (
    DEFAULT_CAPACITY,
    Link,
    LocalPipe,
)
from aqueduct.runtime.handles.headers import Headers, HeadersLike, normalize_headers
from aqueduct.runtime.handles.receiver import OneshotReceiver, Receiver
from aqueduct.runtime.handles.sender import OneshotSender, Sender


def channel(capacity: int = DEFAULT_CAPACITY, headers: HeadersLike = None) -> tuple[Sender, Receiver]:
    """A new local channel pair; send either half inside a message to network it.

    ``capacity`` bounds the local buffer (``send()`` waits when it is full);
    ``headers`` are per-channel headers the peer sees as ``handle.headers``.
    """
    return _make_pair(Sender, Receiver, capacity, False, headers)


def oneshot(headers: HeadersLike = None) -> tuple[OneshotSender, OneshotReceiver]:
    """A pair that carries exactly one message (e.g. a reply)."""
    return _make_pair(OneshotSender, OneshotReceiver, 1, True, headers)


def _make_pair(sender_cls: type, receiver_cls: type, capacity: int, is_oneshot: bool, headers: HeadersLike) -> Any:
    if capacity < 1:
        raise ValueError(f"channel capacity must be at least 1, got {capacity}")
    hdrs = normalize_headers(headers)
    pipe = LocalPipe(capacity, is_oneshot, hdrs)
    pipe.sender = sender_cls(pipe, hdrs)
    pipe.receiver = receiver_cls(pipe, hdrs)
    return pipe.sender, pipe.receiver


# ---------------------------------------------------------------- for the driver and endpoints


def networked_handle(
    link: Link, chanid: int, *, sending: bool, oneshot: bool = False, headers: Headers = ()
) -> Sender | Receiver:
    """A handle for channel ``chanid`` of ``link`` that arrived from it (attached by the peer,
    or the connection's entrypoint): ``sending`` says which half is ours."""
    if sending:
        handle: Sender | Receiver = (OneshotSender if oneshot else Sender)(None, headers)
    else:
        handle = (OneshotReceiver if oneshot else Receiver)(None, headers)
    handle._network(link, chanid, received=True)
    return handle


def give_connection(entrypoint: Sender, connection: Any) -> None:
    """The entrypoint Sender ``connect()`` returns closes ``connection`` when its ``async with`` ends."""
    entrypoint._owns_connection = connection
