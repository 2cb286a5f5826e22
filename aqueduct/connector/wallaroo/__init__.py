"""Wallaroo v3 compatibility: the wire Wallaroo's released connectors speak (spec/wallaroo-compat.md).

:mod:`.frames` is its codec, :mod:`.worker_session` the sans-IO worker
session that maps it onto the events the bridge's ingest consumes; the
bridge serves it over TCP with ``serve_tcp(..., session_factory=WallarooSession)``.
"""
