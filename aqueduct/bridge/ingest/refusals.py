"""The bridge's refusals: the kind of each (a metrics label), counted, and logged without flooding.

Every refusal is counted (``aqueduct_refusals_total{reason=KIND}``); a
line is logged for the first refusal of a kind from a peer's address
(its host: a reconnecting producer comes from a new port each time), then
at most once per :data:`LOG_INTERVAL` for that pair, saying how many were
refused meanwhile, so a flood of bad HELLOs cannot fill the log while an
operator still sees who is refused and why.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from aqueduct.auth.refusals import Refusal
from aqueduct.connector.events import SessionEnded
from aqueduct.connector.stream_refusal import parse_stream_refusal
from aqueduct.logs import fields

__all__ = ["LOG_INTERVAL", "REFUSAL_KINDS", "RefusalLog", "refusal_kind"]

logger = logging.getLogger("aqueduct.bridge.ingest.service")  # where session lines have always come from

#: the credential and permission refusals (docs/connector.md lists their ERROR texts)
_CREDENTIAL_KINDS = tuple(r.value for r in Refusal)

REFUSAL_KINDS = (
    "bad_cookie", "protocol_version", "stream_owner", *_CREDENTIAL_KINDS, "protocol_violation", "connector_error",
    "busy",
)  # fmt: skip

LOG_INTERVAL = 60.0
"""Seconds between two log lines for one peer host and kind (the refusals between are counted)."""

MAX_TRACKED = 10_000
"""Peer host and kind pairs remembered at most; past it, those quiet for an interval are forgotten."""


def refusal_kind(ended: SessionEnded) -> str:
    """Which of :data:`REFUSAL_KINDS` a session ended by an ERROR is (a label for metrics and logs).

    ``connector_error``: the connector sent ERROR itself; the others are the
    bridge's refusals, told apart by their reasons' fixed beginnings
    (docs/connector.md lists them): a credential or permission refusal
    starts with its reason word (``expired: ...``); ``busy`` is a HELLO
    turned away while the bridge drains
    (:meth:`~aqueduct.bridge.ingest.service.Ingest.turn_away`);
    ``protocol_violation`` is every frame error and rule broken. A stream's
    refusal (``stream N refused: REASON``) is of the kind of its reason.
    """
    reason = ended.reason
    if ended.origin == "peer":
        return "connector_error"
    refused = parse_stream_refusal(reason)
    if refused is not None:
        reason = refused[1]
    if reason.startswith("busy: "):
        return "busy"
    if reason.startswith("bad cookie"):
        return "bad_cookie"
    if reason.startswith("unsupported protocol version"):
        return "protocol_version"
    if " belongs to " in reason:  # the log's refusal of another connector's (or identity's) stream id
        return "stream_owner"
    word = reason.partition(":")[0]
    return word if word in _CREDENTIAL_KINDS else "protocol_violation"


@dataclass
class _Seen:
    logged_at: float
    suppressed: int = 0


class RefusalLog:
    """Counts every refusal by kind; logs it as :data:`LOG_INTERVAL` allows per peer host."""

    def __init__(self, counts: Counter[str], clock: Callable[[], float] = time.monotonic) -> None:
        self.counts = counts
        self._clock = clock
        self._seen: dict[tuple[str, str], _Seen] = {}

    def refused(self, kind: str, remote: str, message: str, *args: object, **info: object) -> None:
        """Count one refusal of ``kind`` from ``remote``; log ``message % args`` unless its pair logged lately."""
        self.counts[kind] += 1
        now = self._clock()
        key = (remote.rpartition(":")[0] or remote, kind)
        seen = self._seen.get(key)
        if seen is not None and now - seen.logged_at < LOG_INTERVAL:
            seen.suppressed += 1
            return
        if seen is not None and seen.suppressed:
            message += " (and %d more %s refusal(s) from there in the last %.0f s)"
            args = (*args, seen.suppressed, kind, now - seen.logged_at)
        if len(self._seen) >= MAX_TRACKED:
            self._seen = {k: s for k, s in self._seen.items() if now - s.logged_at < LOG_INTERVAL}
            if len(self._seen) >= MAX_TRACKED:  # a flood from that many hosts: start over
                self._seen.clear()
        self._seen[key] = _Seen(now)
        logger.warning(message, *args, extra=fields(kind=kind, remote=remote, **info))
