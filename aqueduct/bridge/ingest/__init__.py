"""Ingest: connector sessions in, records into the durable log, ACKs out after the sink commit.

:mod:`.service` is the durable sink behind every connector session (the
worker room's ``WorkerSink``); :mod:`.credit_budget` bounds what all sessions
may hold in memory; :mod:`.positions` turns the consumers' committed offsets
into ACKs and truncation.

Neighbours: below it the connector's worker room and the storage room; above
it the application room, which feeds it commit signals. No pyspark here.
"""
