"""``aqueduct_quic_handshakes_completed_total{kind}``: the QUIC handshakes a bridge's listeners completed, full or resumed.

A reconnect storm (a bridge restarted under its fleet) is mostly
handshakes; their rate is how fast the fleet comes back, and the share of
``resumed`` ones (a TLS session ticket: no certificate work, see
:mod:`aqueduct.runtime.backends.session_tickets`) says how much of the
certificate work reconnects skip. The listeners count them anyway
(``WorkerServer.completed_handshakes``); this collector reads the counts
at scrape time. Each is a small dict of two keys, copied whole in one step
(atomic under the GIL), so unlike the bridge's other series
(:mod:`aqueduct.bridge.app.metrics`) no snapshot on the bridge's loop is
needed. Both kinds are always present (0 until one happens); a picoquic
listener completes its handshakes in C and counts none.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from aqueduct.connector.worker.server import WorkerServer

KINDS = ("full", "resumed")


class ListeningBridge(Protocol):
    """What the collector reads of the bridge: its listeners."""

    @property
    def listeners(self) -> list[WorkerServer]: ...


class HandshakeCollector:
    """A ``prometheus_client`` collector of the bridge's completed QUIC handshakes, by kind."""

    def __init__(self, bridge: ListeningBridge) -> None:
        self.bridge = bridge

    def describe(self) -> list[Any]:
        return []  # nothing to check at registration (collect needs the listeners)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        totals: dict[str, int] = {}
        for listener in list(self.bridge.listeners):
            for kind, n in dict(listener.completed_handshakes()).items():
                totals[kind] = totals.get(kind, 0) + n
        completed = CounterMetricFamily(
            "aqueduct_quic_handshakes_completed",
            "QUIC handshakes the listeners completed, by kind: full (certificate work) or resumed (a TLS "
            "session ticket); none counted on picoquic.",
            labels=["kind"],
        )
        for kind in KINDS:
            completed.add_metric([kind], totals.get(kind, 0))
        yield completed
