"""The application: the running bridge, its command line, and the bridge in your own driver.

:mod:`.service` owns the bridge's lifetimes (what starts and stops in which
order) and ``serve``; around it, one room per part it runs:
:mod:`.config` (what it is told), :mod:`.listeners` (the connector
listeners), :mod:`.tls` (its certificate), :mod:`.served_log` (the log
over Flight, and the source options that read it), :mod:`.spark_query`
(Spark's session, the query, the listener, the watchdog),
:mod:`.commit_signals` (the queries' commits into acks and truncation),
:mod:`.metrics` (``/metrics``) and :mod:`.progress` (its counters).
:mod:`.spark_bridge` is the same bridge inside a user's Spark application;
:mod:`.cli` is ``aqueduct-bridge``; :mod:`.status` its read-only report;
:mod:`.pipeline` the query ``serve`` runs; :mod:`.commit_log` and
:mod:`.commit_listener` hear Spark's commits; :mod:`.checkpoint` repairs a
killed query's checkpoint.

Neighbours: it is the top room, above ingest, source and storage; it and the
source room are the only places that import pyspark (lazily where a command
such as ``status`` does not need Spark).
"""
