"""What the connector library raises: one module, so both sides and every transport share it.

:class:`ConnectorRefused` ends a producer for good (retrying would not help;
:class:`TlsRefused` when its TLS handshake failed, which a link reports as
:class:`HandshakeFailed`); :class:`StreamRefused` ends one stream for good,
its connector going on with the others; :class:`ConnectorClosed` is a
record's delivery error when the connector closed first;
:class:`WorkerBusy` asks it to come back later; :class:`CreditTimeout` is a
``send`` that waited too long for a credit. Keeping them apart from the
client breaks the import cycle a transport raising ``WorkerBusy`` would make.
"""

from __future__ import annotations

from aqueduct.proto.errors import AqueductError


class ConnectorRefused(AqueductError):
    """The worker ended the session with ERROR (or broke the protocol): retrying would not help."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TlsRefused(ConnectorRefused):
    """The TLS handshake failed (e.g. the bridge's certificate does not verify with ``cafile``).

    Retrying with the same certificates cannot help, so the connector gives
    up at once unless it was told to retry permanent errors.
    """


class StreamRefused(ConnectorRefused):
    """The worker refused one stream (its grant does not cover it, another producer owns it).

    ``reason`` is the worker's rule, naming the stream (``stream_not_allowed:
    stream 'billing-9' (id 9) is not in streams orders-* of token ...``). Only
    that stream is given up: its records are reported with this error, its
    ``send`` and ``wait_acked`` raise it, and the connector goes on with its
    other streams; ``flush`` and ``wait_all_acked`` raise it once those are
    committed. A subclass of :class:`ConnectorRefused`, so code catching
    that sees it too.
    """

    def __init__(self, stream_id: int, stream_name: str, reason: str) -> None:
        super().__init__(reason)
        self.stream_id = stream_id
        self.stream_name = stream_name


class ConnectorClosed(ConnectionError):
    """The connector closed before the worker committed the record (its delivery report's error)."""


class CreditTimeout(TimeoutError):
    """``send`` waited longer than ``credits_timeout`` for a credit.

    The message keeps its id and stays queued: it goes out with the next
    credit, so the caller must not send it again.
    """


class WorkerBusy(ConnectionError):
    """The worker refused the connection for now and named when to retry: between ``retry_not_before`` and ``retry_within`` seconds.

    ``turn``: the place in the worker's queue it named, if any, which the
    next attempt sends back (:mod:`aqueduct.runtime.retry_hint`).
    """

    def __init__(self, message: str, retry_within: float, retry_not_before: float = 0.0, turn: bytes = b"") -> None:
        super().__init__(message)
        self.retry_within = retry_within
        self.retry_not_before = retry_not_before
        self.turn = turn


class HandshakeFailed(ConnectionError):
    """A link could not be opened because the TLS handshake failed (a permanent error)."""
