"""The application: the running bridge, its command line, and the bridge in your own driver.

:mod:`.service` wires listeners, log, Spark query and acks together and owns
their lifetimes; :mod:`.receiver` is the same bridge inside a user's Spark
application; :mod:`.cli` is ``aqueduct-bridge``; :mod:`.status` its read-only
report; :mod:`.pipeline` the query ``serve`` runs; :mod:`.commit_listener`
hears Spark's commits; :mod:`.checkpoint` repairs a killed query's checkpoint.

Neighbours: it is the top room, above ingest, source and storage; it and the
source room are the only places that import pyspark (lazily where a command
such as ``status`` does not need Spark).
"""
