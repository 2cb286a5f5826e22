"""Ingest: connector sessions in, records into the durable log, ACKs out after the sink commit.

In the order data flows: :mod:`.service` is the durable sink behind every
connector session (the worker room's ``WorkerSink``: sessions, streams,
their ends); :mod:`.group_commit` writes their records into the log and
makes them durable, one group commit at a time; :mod:`.credits` decides
what the credits a group commit earned become (:mod:`.credit_budget`
bounds what all sessions may hold, :mod:`.backlog` how far Spark lags,
:mod:`.fair_share` which sessions still get credits over ``max_lag``);
:mod:`.acks` is the way back, every ACK frame to a producer and the log's
truncation; :mod:`.positions` turns the consumers' committed offsets into
those ACKs and truncation.

Neighbours: below it the connector's worker room and the storage room; above
it the application room, which feeds it commit signals. No pyspark here.
"""
