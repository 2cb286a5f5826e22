"""Records, below both wings: what the connector's worker side hands over and the log stores.

One stream's records travel from the worker session through the bridge's
ingest into the durable log as one batch of columns
(:class:`~aqueduct.records.columns.RecordColumns`); both sides apply the
one rulebook of points of reference and deduplication
(:class:`~aqueduct.records.points.StreamPoints`); a record's flags mean
the same everywhere (:mod:`aqueduct.records.flags`). Living here, beneath
``aqueduct.connector`` and ``aqueduct.bridge.storage``, they let the log
depend on what a record is rather than on the connector's wire format.

Pure: no I/O, no clock; it imports only :mod:`aqueduct.wire`.
"""
