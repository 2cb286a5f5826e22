"""The log served over the network: an Arrow Flight server beside the bridge's log.

Executors of a Spark cluster rarely see the bridge's disk. This server
gives them what the ``aqueduct`` source otherwise reads from the log
directory (:class:`~aqueduct.bridge.source.log_access.LocalLog` does the work
here, so a remote read is the local one, shipped):

- the action ``streams``: each stream's meta and index entries (the
  complete-epoch frontiers and byte sizes planning needs), sent again only
  for the streams that changed since the caller's last call; a caller that
  names its ``consumer`` also hears whether it was dropped (``dropped``:
  the reason, or null), the question a reader asks at every trigger, so it
  costs no call of its own;
- ``DoGet`` of a ticket ``{"stream", "start", "end"}``: those records as
  Arrow record batches in the stored schema, exactly the local read's,
  each tagged (``app_metadata``) with the offset after its last record, so
  a reader resuming after a broken stream starts exactly there, even past
  a batch ``failOnDataLoss=false`` skipped;
- the actions ``register``, ``check_consumer`` (for readers that do not
  ask it with ``streams``) and ``commit``: the consumer
  registry, so the bridge acks and truncates after a cluster query's
  commits exactly as after a local one's. A commit is written to the
  consumer's commit file and handed to ``on_commit`` at once: the bridge's
  poll of those files runs every few seconds, and its producers would wait
  for their ACKs that long.

Why Flight: Arrow record batches go over gRPC without a conversion, TLS
and call headers are built in, and ``pyarrow`` (a dependency already)
ships client and server. Every call must carry ``authorization: Bearer
<token>``; a middleware refuses any other before the call reaches the
log, so nothing is served without the credential. The token lives in
``<log>/tls/flight.token`` (created once, mode 0600) so it survives
restarts: a running query's executors keep theirs.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from aqueduct.bridge.source.log_access import LocalLog
from aqueduct.bridge.storage.consumers import ConsumerError, StreamSelection, check_consumer_name
from aqueduct.bridge.storage.corruption import corrupt_handler
from aqueduct.bridge.storage.flight_protocol import AUTH_HEADER, BEARER, RESUME_AT, STREAM_HEAD
from aqueduct.bridge.storage.index import MAGIC, encode_entry
from aqueduct.bridge.storage.offset import SourceOffset
from aqueduct.bridge.storage.schema import STORED_SCHEMA
from aqueduct.bridge.storage.segment import BatchCorrupt
from aqueduct.bridge.storage.view import StreamIndex

TOKEN_FILE = "flight.token"  # inside the bridge's TLS directory

CommitHandler = Callable[[str, dict[int, int]], None]
"""``on_commit(consumer, positions)``: a reader committed; called on a Flight thread after the commit file is written."""


def load_or_create_token(path: Path) -> str:
    """The token in ``path``; a new random one is written there (0600) if there is none."""
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        token = ""
    if token:
        return token
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


class _CredentialCheck(flight.ServerMiddlewareFactory):
    """Refuse every call that does not present the token, before it reaches the log."""

    def __init__(self, token: str) -> None:
        self._expected = (BEARER + token).encode()

    def start_call(self, info: flight.CallInfo, headers: dict[str, list[Any]]) -> None:
        given = headers.get(AUTH_HEADER, [])
        value = given[0] if len(given) == 1 else b""
        if isinstance(value, str):
            value = value.encode()
        if not hmac.compare_digest(value, self._expected):
            raise flight.FlightUnauthenticatedError("aqueduct bridge: missing or wrong credential")
        return None


class _Catalog:
    """The log's stream snapshots, with a generation per change, shared by all callers.

    A caller says which generation (of which server instance) it holds;
    the answer carries only the streams changed after it, so a trigger
    over thousands of quiet streams costs a few bytes.
    """

    def __init__(self, log: LocalLog) -> None:
        self._snapshots = log.snapshots()
        self._lock = threading.Lock()
        self.instance = secrets.token_hex(8)  # a restarted server: callers start over
        self.generation = 0
        self._last: dict[int, StreamIndex] | None = None
        self._changed_at: dict[int, int] = {}
        self._ids_at = 0  # when the set of stream ids last changed

    def refresh(self) -> dict[int, StreamIndex]:
        with self._lock:
            streams = self._snapshots.load()
            last = self._last
            if streams is last:
                return streams
            self.generation += 1
            changed = self._snapshots.changed
            candidates = streams.keys() if last is None or changed is None else changed
            for sid in candidates:
                if sid in streams and (last is None or last.get(sid) is not streams[sid]):
                    self._changed_at[sid] = self.generation
            if last is None or streams.keys() != last.keys():
                self._ids_at = self.generation
                for sid in set(self._changed_at) - set(streams):
                    del self._changed_at[sid]
            self._last = streams
            return streams

    def since(self, instance: str, generation: int, extra: dict[str, Any]) -> Iterator[bytes]:
        """The ``streams`` answer for a caller holding ``generation`` of ``instance``; ``extra`` joins its header."""
        streams = self.refresh()
        with self._lock:
            if instance != self.instance:
                generation = 0
            now, ids_at = self.generation, self._ids_at
            sent = [sid for sid, at in self._changed_at.items() if at > generation]
        header = {"instance": self.instance, "generation": now, "ids": list(streams) if ids_at > generation else None}
        header |= extra
        yield json.dumps(header).encode()
        for sid in sent:
            s = streams.get(sid)
            if s is not None:
                meta = s.meta.to_json()
                yield STREAM_HEAD.pack(sid, len(meta)) + meta + MAGIC + b"".join(encode_entry(e) for e in s.entries)


class LogFlightServer(flight.FlightServerBase):
    """Serves one log directory to the source's remote readers (see the module docstring).

    Listening starts on construction; :meth:`shutdown` stops it.
    """

    def __init__(
        self, log_dir: Path, host: str, port: int, token: str, certfile: Path, keyfile: Path,
        on_commit: CommitHandler | None = None,
    ) -> None:  # fmt: skip
        self.log = LocalLog(log_dir)
        self.on_commit = on_commit
        self._catalog = _Catalog(self.log)
        location = flight.Location.for_grpc_tls(host, port)
        super().__init__(
            location,
            tls_certificates=[flight.CertKeyPair(certfile.read_bytes(), keyfile.read_bytes())],
            middleware={"credential": _CredentialCheck(token)},
        )
        self.host = host

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        return flight.GeneratorStream(STORED_SCHEMA, iter(self.tagged_batches(ticket)))

    def tagged_batches(self, ticket: flight.Ticket) -> list[tuple[pa.RecordBatch, pa.Buffer]]:
        """A ticket's batches, each with its ``app_metadata``: the offset after its last record.

        Slices of the memory-mapped segments (no copy), every one checked
        against its checksum before the first is sent; gRPC streams them from C++.
        """
        try:
            want = json.loads(ticket.ticket)
            sid, start, end = int(want["stream"]), int(want["start"]), int(want["end"])
        except (ValueError, KeyError, TypeError):
            raise flight.FlightServerError(
                'aqueduct bridge: a ticket is {"stream": id, "start": offset, "end": offset}'
            ) from None
        s = self._catalog.refresh().get(sid)
        if s is None:
            raise flight.FlightServerError(f"aqueduct bridge: the log has no stream {sid}")
        try:
            entries = s.entries_between(start, end)
        except IndexError as e:
            raise flight.FlightServerError(f"aqueduct bridge: {e}") from None
        on_corrupt = corrupt_handler(bool(want.get("skip_corrupt")))
        try:
            return [
                (batch, pa.py_buffer(RESUME_AT.pack(min(end, e.end_offset))))
                for e in entries
                for batch in s._batches([e], start, end, on_corrupt)
            ]
        except BatchCorrupt as found:
            raise flight.FlightServerError(f"aqueduct bridge: {found}") from None

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return [
            ("streams", "stream metas and index entries changed since a generation"),
            ("register", "register a consumer at start positions"),
            ("check_consumer", "whether a consumer was dropped"),
            ("commit", "record a consumer's committed positions"),
        ]

    def _consumer_state(self, body: dict[str, Any]) -> dict[str, Any]:
        """``{"dropped": reason or None}`` of the consumer a ``streams`` call names; nothing if it names none."""
        if body.get("consumer") is None:
            return {}
        try:
            consumer = check_consumer_name(str(body["consumer"]))
        except ConsumerError as e:
            raise flight.FlightServerError(f"aqueduct bridge: bad streams request: {e}") from None
        try:
            self.log.check_not_dropped(consumer)
        except ConsumerError as e:
            return {"dropped": str(e)}
        return {"dropped": None}

    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterator[bytes]:
        try:
            body = json.loads(action.body.to_pybytes() or b"{}")
        except ValueError:
            raise flight.FlightServerError("aqueduct bridge: an action's body is a JSON object") from None
        if action.type == "streams":
            return self._catalog.since(
                str(body.get("instance", "")), int(body.get("generation", 0)), self._consumer_state(body)
            )
        try:
            consumer = check_consumer_name(str(body.get("consumer", "")))
            if action.type == "register":
                start = SourceOffset.parse(body.get("start", {})).stream_ids()
                self.log.register(consumer, start, StreamSelection.from_json(body.get("reads")))
            elif action.type == "check_consumer":
                self.log.check_not_dropped(consumer)
            elif action.type == "commit":
                offsets = SourceOffset.parse(body["offsets"]).stream_ids()
                self.log.commit(consumer, offsets, int(body.get("skipped", 0)))
                if self.on_commit is not None:
                    self.on_commit(consumer, offsets)
            else:
                raise flight.FlightServerError(f"aqueduct bridge: unknown action {action.type!r}")
        except ConsumerError as e:
            return iter([json.dumps({"error": str(e)}).encode()])
        except (KeyError, TypeError, ValueError) as e:
            raise flight.FlightServerError(f"aqueduct bridge: bad {action.type} request: {e!r}") from None
        return iter([b'{"error": null}'])


def start_flight_server(
    log_dir: Path, host: str, port: int, *, token: str, certfile: Path, keyfile: Path,
    on_commit: CommitHandler | None = None,
) -> LogFlightServer:  # fmt: skip
    """Listen on ``host:port`` (0: any free port) and serve ``log_dir``; ``server.address`` says where."""
    return LogFlightServer(log_dir, host, port, token, certfile, keyfile, on_commit)

