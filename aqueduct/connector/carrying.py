"""How connector frames ride their carriers (spec/connector-wire.md section 3): what both sides share.

Over TCP a connection is one frame sequence, read :data:`READ_SIZE` bytes at
a time. Over Aqueduct, every payload is raw bytes holding whole frames (so a capture of payloads is
a valid connector byte stream); several frames may share a payload.

* HELLO goes on the entrypoint (ORDERED) with an attached channel whose
  Sender half goes to the worker: OK, ERROR, ACK and RESTART come back on it.
* Each NOTIFY goes on the entrypoint with an attached channel whose Sender
  half stays with the connector: that stream's MESSAGE frames go on it, in
  the stream's mode. Several NOTIFYs in one payload carry their channels as
  attachments in the same order. The channel header ``connector-mode`` tells
  the worker the mode, so its deduplication knows whether gaps can still
  fill (only in-order channels let a point of reference skip ids).
* A stream channel lost in transit means its NOTIFY never took effect: the
  link reports the session over, and the client reconnects and re-notifies
  every stream from the new OK's points of reference.

Requires ``Sender.send(payload, attachments=...)`` from the runtime: raw
bytes cannot carry a handle inside a CBOR value.
"""

from __future__ import annotations

MODE_HEADER = "connector-mode"
#: Connector payloads are always raw frames: announcing octet-stream as the
#: connection's content type spares every message a per-message
#: ``content-type`` header (39 bytes, more than a third of a small MESSAGE).
RAW_CONNECTION_HEADERS = {"content-type": "application/octet-stream"}

READ_SIZE = 256 * 1024
"""Bytes asked of a TCP socket per read, on either side of a connection."""
