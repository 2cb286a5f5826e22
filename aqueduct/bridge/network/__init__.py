"""The network read path: the log served to readers anywhere over Arrow Flight.

:mod:`.flight_server` serves a bridge's log (stream snapshots for planning,
record ranges for executors, the consumer registry for commits) over TLS to
callers presenting the bridge's token; the client side, how the Spark source
reads a remote log, is :mod:`aqueduct.bridge.source.flight_client`; the wire
both ends share is :mod:`aqueduct.bridge.storage.flight_protocol`.

Neighbours: it serves what the storage room holds, through the source room's
:class:`~aqueduct.bridge.source.log_access.LocalLog`; the application room
starts it. No pyspark here.
"""
