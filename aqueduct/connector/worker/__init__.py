"""The worker side: accepting connectors and feeding their sessions to a sink.

:mod:`.server` is the transport-independent glue between a worker session and
a pluggable :class:`~aqueduct.connector.worker.server.WorkerSink`;
:mod:`.aqueduct_listener` (QUIC) and :mod:`.tcp_listener` accept connections;
:mod:`.memory_sink` is the smallest complete sink.

Neighbours: the protocol core in :mod:`aqueduct.connector` below it (and the
Wallaroo session), the runtime for QUIC; the bridge's ingest room is its main
sink. It never imports the producer room.
"""
