"""Storage: the bridge's durable log on disk, and the files readers share with it.

The writer (:mod:`.log`, whose jobs are its own modules: each stream's
records path :mod:`.stream_writer` and :mod:`.pending`, the group commit
:mod:`.group_commit`, a stream's files :mod:`.stream_files` and the ones kept
open :mod:`.open_files`, new streams :mod:`.stream_creation`, dedup across
restarts :mod:`.received`, its errors :mod:`.errors`) appends Arrow IPC
segments (:mod:`.segment`) and the per-stream index that alone says which
bytes are data (:mod:`.index`), made durable by group commits
(:mod:`.durability`). Readers in other processes
(Spark's Python workers, ``status``) see it through :mod:`.view`, follow
:mod:`.changes`, and share three small files with the writer: the consumer
registry (:mod:`.consumers`), each consumer's committed offsets
(:mod:`.commits`) and the acked offsets (:mod:`.acked`), all offsets of the
one type the Spark source plans with (:mod:`.offset`).

Neighbours: the ingest room writes here; the Spark source room reads here.
Nothing in this room imports pyspark or asyncio, nor the connector: a record
is what :mod:`aqueduct.records` says it is.
"""
