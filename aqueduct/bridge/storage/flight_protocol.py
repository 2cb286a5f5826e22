"""The Flight wire a bridge's log server and the Spark source's remote reader share.

Both ends of :mod:`aqueduct.bridge.network.flight_server` and
:mod:`aqueduct.bridge.source.flight_client` pack and read these, so they
live below both rooms (here, beside the index entries the ``streams``
answer carries) and neither side imports the other.
"""

from __future__ import annotations

import struct

__all__ = ["AUTH_HEADER", "BEARER", "RESUME_AT", "STREAM_HEAD"]

AUTH_HEADER = "authorization"  # every call carries "Bearer <token>"
BEARER = "Bearer "

#: ``streams`` answers: one header, then per stream sent this (id, meta length), the meta,
#: and its index entries as the index file holds them (magic, CRC'd entries).
STREAM_HEAD = struct.Struct("<QI")

#: A ``DoGet`` batch's ``app_metadata``: the stream offset after its last record (where to resume).
RESUME_AT = struct.Struct("<Q")
