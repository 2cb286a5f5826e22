"""How a worker refuses one stream on the connector's wire: an ERROR of a fixed form.

The wire (spec/connector-wire.md) has no answer to a NOTIFY: a refusal is
an ERROR, which ends the session. To refuse a *stream* rather than the
connector, the worker words that ERROR ``stream N refused: RULE`` (``RULE``
names what refused it: ``stream_not_allowed: ...``, ``stream 7 belongs to
...``). A connector that reads the form gives that stream up (its records
fail with the rule), reconnects at once and goes on with its other streams,
never notifying the refused one again; one that does not (an older
release) sees an ERROR naming the stream and the rule, as before, and
stops. The same words work over TCP, TLS and QUIC, on every QUIC backend,
with nothing new on the wire: docs/connector.md ("One stream refused")
says why this form rather than a per-stream frame or a closed channel.
"""

from __future__ import annotations

import re

__all__ = ["parse_stream_refusal", "stream_refusal"]

_FORM = re.compile(r"stream ([0-9]{1,20}) refused: (.+)", re.DOTALL)


def stream_refusal(stream_id: int, rule: str) -> str:
    """The ERROR reason refusing stream ``stream_id`` for ``rule``."""
    return f"stream {stream_id} refused: {rule}"


def parse_stream_refusal(reason: str) -> tuple[int, str] | None:
    """``(stream id, rule)`` of an ERROR reason in :func:`stream_refusal`'s form, else None."""
    found = _FORM.fullmatch(reason)
    if found is None:
        return None
    return int(found.group(1)), found.group(2)
