"""The source's remote log: a bridge's Flight server (:mod:`aqueduct.bridge.network.flight_server`).

:class:`RemoteLog` is the :class:`~aqueduct.bridge.source.log_access.LogAccess`
of a log read over the network: the planner's snapshots come from the
server's ``streams`` action as :class:`RemoteStreamIndex` objects (the
same index entries, so planning cannot tell them from local ones), and an
executor's slice is one ``DoGet``.

The credential and the CA certificate are read once, on the driver, when
the reader is made (from files or an environment variable the options
*name*), and travel to executors inside the pickled reader: never in an
option, a plan or a log line. ``repr`` leaves them out.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from aqueduct.bridge.source.bridge_list import split_address
from aqueduct.bridge.source.log_access import stream_id
from aqueduct.bridge.source.planning import Slice
from aqueduct.bridge.storage.consumers import ConsumerError, StreamSelection
from aqueduct.bridge.storage.flight_protocol import AUTH_HEADER, BEARER, RESUME_AT, STREAM_HEAD
from aqueduct.bridge.storage.index import IndexEntry, decode_entries
from aqueduct.bridge.storage.offset import SourceOffset
from aqueduct.bridge.storage.view import StreamIndex, StreamMeta

logger = logging.getLogger(__name__)

#: Seconds a planning or registry call may take; a record read may take READ_TIMEOUT.
CALL_TIMEOUT = 60.0
READ_TIMEOUT = 600.0
#: Seconds an executor's read waits for a bridge that went away before its task fails.
RECONNECT_WINDOW = 60.0

#: Where the token is looked for when no option names a file or variable.
DEFAULT_TOKEN_ENV = "AQUEDUCT_BRIDGE_TOKEN"

#: A bridge that does not answer: planning keeps its last snapshot, a commit waits for the next.
#: A call cancelled is one too: a bridge stopping (SIGTERM) cancels the calls it has in flight.
UNREACHABLE = (flight.FlightUnavailableError, flight.FlightTimedOutError, flight.FlightCancelledError)


#: What the bridge's error says when a stored batch failed its checksum.
CORRUPT_MARK = "fails its CRC32C check"


class RemoteCorruption(RuntimeError):
    """A bridge found a stored batch of the range failing its checksum (it names where)."""


def _server_words(error: Exception) -> str:
    """The server's message, without gRPC's decoration around it (nor a Python traceback it carries)."""
    text = str(error)
    start = text.find("aqueduct bridge: ")
    return (text[start + len("aqueduct bridge: ") :] if start >= 0 else text).split(". Detail:")[0]


def log_missed_commit(bridge: str, error: Exception, unreachable: bool) -> None:
    """One line for a commit ``bridge`` did not take: the sink has the batch, only that bridge's ACKs wait.

    The next commit that reaches it covers this one (offsets are absolute).
    Unreachable is weather (WARNING); an error the bridge answered, such as
    its log disk full as it writes the commit file, is for an operator (ERROR).
    """
    (logger.warning if unreachable else logger.error)(
        "aqueduct source: commit to bridge %s failed (%s); its ACKs wait, the next commit covers it",
        bridge,
        _server_words(error),
    )


class BridgeCredentialError(ValueError):
    """The token or CA certificate for a bridge cannot be read."""


#: No ``streams`` answer said whether the consumer was dropped since the last :meth:`RemoteLog.check_not_dropped`.
UNHEARD = object()


class RemoteLog:
    """A log behind a bridge's Flight server at ``address`` (``HOST:PORT``).

    ``consumer``: the reader's consumer. Every ``streams`` call names it and
    its answer says whether the bridge dropped it, so the check a reader
    makes at every trigger (:meth:`check_not_dropped`, after loading the
    streams) costs no call of its own; a bridge that does not answer that
    (one older than this) is asked with ``check_consumer``.
    """

    def __init__(self, address: str, token: str, ca: bytes | None = None, consumer: str | None = None) -> None:
        self.address = address
        self.host, self.port = split_address(address)
        self._token = token
        self._ca = ca
        self._flight: flight.FlightClient | None = None
        self.consumer = consumer
        #: what the last ``streams`` answer said of ``consumer`` (the reason it was dropped, or None), until checked
        self._dropped: object = UNHEARD
        #: seconds a call may take, and a read waits for the bridge to come back (a failover query: bridgeTimeout,
        #: and no wait, since another copy may serve the read)
        self.call_timeout = CALL_TIMEOUT
        self.reconnect_window = RECONNECT_WINDOW
        #: seconds connecting (TCP and TLS) may take before a call fails as unreachable (None: the call's
        #: own timeout); a failover query sets bridgeConnectTimeout, so a partitioned host costs that
        self.connect_timeout: float | None = None
        #: a commit the bridge does not get or fails (unreachable, its disk full) is only logged: the next
        #: one covers it; a failover query wants the error, to send again what the commit carried
        self.quiet_commits = True

    def __repr__(self) -> str:
        return f"RemoteLog({self.address!r})"  # never the token

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_flight", "_dropped")} | {"_flight": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _dropped=UNHEARD)

    # ------------------------------------------------------------ transport

    def _client(self) -> flight.FlightClient:
        """The channel, dialled on first use (and after a failure: see :meth:`action`).

        gRPC bounds a connection attempt by its minimum reconnect backoff
        (20 s by default), and a call made while the channel connects waits
        for it up to the call's own timeout: against a host that drops
        packets, the whole timeout. With :attr:`connect_timeout` the attempt
        gives up after that long and the call fails ``UNAVAILABLE`` at once.
        """
        if self._flight is None:
            tls: dict[str, Any] = {"tls_root_certs": self._ca} if self._ca else {}
            if self.connect_timeout is not None:
                tls["generic_options"] = [("grpc.min_reconnect_backoff_ms", max(1, round(self.connect_timeout * 1000)))]
            host = f"[{self.host}]" if ":" in self.host else self.host
            self._flight = flight.FlightClient(f"grpc+tls://{host}:{self.port}", **tls)
        return self._flight

    def _options(self, timeout: float) -> flight.FlightCallOptions:
        return flight.FlightCallOptions(
            headers=[(AUTH_HEADER.encode(), (BEARER + self._token).encode())], timeout=timeout
        )

    def action(self, name: str, body: Mapping[str, Any]) -> list[bytes]:
        """The result bodies of action ``name``.

        After a failure to reach the bridge the channel is dropped: gRPC
        would wait out its reconnect backoff (up to minutes) before trying a
        restarted bridge again; the next call dials afresh instead.
        """
        try:
            results = self._client().do_action(
                flight.Action(name, json.dumps(body).encode()), self._options(self.call_timeout)
            )
            return [r.body.to_pybytes() for r in results]
        except UNREACHABLE:
            self._flight = None
            raise

    def _registry(self, name: str, body: Mapping[str, Any]) -> None:
        (answer,) = self.action(name, body)
        error = json.loads(answer)["error"]
        if error is not None:
            raise ConsumerError(error)

    def fetch(self, sid: int, start: int, end: int, skip_corrupt: bool = False) -> Iterator[pa.RecordBatch]:
        """Stored-schema batches of stream ``sid``'s records ``[start, end)``, as the server streams them.

        A bridge that goes away mid-read (killed, restarted) is waited for
        up to :attr:`reconnect_window` seconds (:data:`RECONNECT_WINDOW`), and the read resumes at the
        first record not yet yielded (each batch carries the offset after it,
        so a batch skipped as corrupt does not shift that): stored records
        never change, so the rows are those of one uninterrupted read. Beyond that the task fails
        and Spark retries it.
        """
        pos, waited, pause = start, 0.0, 0.1
        ticket = {"stream": sid, "start": pos, "end": end, "skip_corrupt": skip_corrupt}
        while pos < end:
            ticket["start"] = pos
            try:
                reader = self._client().do_get(flight.Ticket(json.dumps(ticket).encode()), self._options(READ_TIMEOUT))
                while True:
                    try:
                        chunk = reader.read_chunk()
                    except StopIteration:
                        return
                    # Where the next record is: counting rows would fall short after a
                    # skipped corrupt batch and read rows of the next one twice on resume.
                    tag = chunk.app_metadata
                    pos = RESUME_AT.unpack(tag.to_pybytes())[0] if tag is not None else pos + chunk.data.num_rows
                    waited, pause = 0.0, 0.1
                    yield chunk.data
            except flight.FlightServerError as e:
                if CORRUPT_MARK in str(e):
                    raise RemoteCorruption(_server_words(e)) from None
                raise
            except UNREACHABLE as e:
                self._flight = None
                if waited >= self.reconnect_window:
                    raise
                logger.warning("aqueduct source: bridge %s unreachable mid-read (%s); retrying", self.address, e)
                time.sleep(pause)
                waited += pause
                pause = min(pause * 2, 2.0)

    # ------------------------------------------------------------ LogAccess

    def snapshots(self, skip_corrupt: bool = False) -> RemoteSnapshots:
        return RemoteSnapshots(self, skip_corrupt)

    def read(self, piece: Slice, skip_corrupt: bool = False) -> Iterator[pa.RecordBatch]:
        return self.fetch(stream_id(piece), piece.start, piece.end, skip_corrupt)

    def register(self, consumer: str, start: Mapping[int, int], reads: StreamSelection) -> None:
        self._registry(
            "register", {"consumer": consumer, "start": SourceOffset(start).spark(), "reads": reads.to_json()}
        )

    def streams(self, instance: str, generation: int) -> list[bytes]:
        """The ``streams`` answer after ``generation`` of ``instance`` (header first); it says whether ``consumer`` was dropped."""
        body: dict[str, Any] = {"instance": instance, "generation": generation}
        if self.consumer is not None:
            body["consumer"] = self.consumer
        answer = self.action("streams", body)
        if self.consumer is not None:
            self._dropped = json.loads(answer[0]).get("dropped", UNHEARD)
        return answer

    def check_not_dropped(self, consumer: str) -> None:
        """Raise :class:`ConsumerError` if the bridge dropped ``consumer``: from the last ``streams`` answer, else asked."""
        heard, self._dropped = self._dropped, UNHEARD
        if consumer == self.consumer and heard is not UNHEARD:
            if heard is not None:
                raise ConsumerError(str(heard))
            return
        try:
            self._registry("check_consumer", {"consumer": consumer})
        except UNREACHABLE as e:
            logger.warning("aqueduct source: bridge %s unreachable (%s); its streams wait", self.address, e)

    def commit(self, consumer: str, positions: Mapping[int, int], skipped: int) -> None:
        """Offsets are absolute: a commit a dead bridge missed is covered by the next one it gets."""
        body = {"consumer": consumer, "offsets": SourceOffset(positions).spark(), "skipped": skipped}
        try:
            self._registry("commit", body)
        except (*UNREACHABLE, flight.FlightServerError) as e:
            if not self.quiet_commits:
                raise
            log_missed_commit(self.address, e, unreachable=isinstance(e, UNREACHABLE))


@dataclass(frozen=True)
class RemoteStreamIndex(StreamIndex):
    """A stream's index as the bridge sent it; record columns (epoch questions) come over Flight."""

    remote: RemoteLog = field(kw_only=True, compare=False, repr=False)

    def _lookup(self, e: IndexEntry, start: int, end: int) -> pa.RecordBatch | None:
        """The bridge reads the batch under the same rule, where the bytes are.

        It records a corrupt batch in its log's ``corrupt/``, then fails the
        call (:class:`RemoteCorruption` here) or, with ``skip_corrupt``,
        sends nothing for it.
        """
        batches = list(self.remote.fetch(self.stream_id, start, end, self.skip_corrupt))
        return batches[0] if batches else None


class RemoteSnapshots:
    """:class:`~aqueduct.bridge.storage.view.LogSnapshots` over Flight: only changed streams travel.

    While the bridge does not answer, :meth:`load` keeps the last snapshot
    (its streams stay where they were; other logs of the query go on).
    """

    def __init__(self, remote: RemoteLog, skip_corrupt: bool = False) -> None:
        self.remote = remote
        self.skip_corrupt = skip_corrupt  # what the streams' epoch questions do with a corrupt batch
        self._instance = ""
        self._generation = 0
        self._last: dict[int, StreamIndex] | None = None
        self.changed: set[int] | None = None
        #: loads the bridge did not answer (the last snapshot served instead): a failover reader watches it
        self.failures = 0

    def load(self) -> dict[int, StreamIndex]:
        try:
            header, *bodies = self.remote.streams(self._instance, self._generation)
        except UNREACHABLE as e:
            if self._last is None:
                raise
            logger.warning("aqueduct source: bridge %s unreachable (%s); its streams wait", self.remote.address, e)
            self.failures += 1
            self.changed = set()
            return self._last
        head = json.loads(header)
        fresh = head["instance"] != self._instance or self._last is None
        self._instance, self._generation = head["instance"], head["generation"]
        streams = {} if fresh else dict(self._last or {})
        for body in bodies:
            s = self._decode(body)
            streams[s.stream_id] = s
        if head["ids"] is not None:
            streams = {sid: streams[sid] for sid in sorted(head["ids"]) if sid in streams}
        elif not bodies and self._last is not None and not fresh:
            self.changed = set()
            return self._last
        self.changed = None if fresh else {STREAM_HEAD.unpack_from(b)[0] for b in bodies}
        self._last = streams
        return streams

    def _decode(self, body: bytes) -> RemoteStreamIndex:
        sid, meta_len = STREAM_HEAD.unpack_from(body)
        at = STREAM_HEAD.size
        meta = StreamMeta.from_json(body[at : at + meta_len])
        index = body[at + meta_len :]
        entries, valid = decode_entries(index)
        if valid != len(index):
            raise ValueError(f"aqueduct source: bridge {self.remote.address} sent a damaged index of stream {sid}")
        directory = Path(f"{self.remote.address}/streams/{sid}")  # a label: records come over Flight
        return RemoteStreamIndex(meta, directory, tuple(entries), self.skip_corrupt, remote=self.remote)


# ---------------------------------------------------------------- credentials


def _per_name(text: str | None, names: list[str | None], option: str) -> dict[str | None, str | None]:
    """``PATH`` for every bridge, or ``NAME=PATH,NAME=PATH`` one each."""
    if text is None or "=" not in text:
        return dict.fromkeys(names, text)
    given = dict(part.strip().partition("=")[::2] for part in text.split(","))
    missing = [n for n in names if n not in given]
    if missing:
        raise BridgeCredentialError(f"{option} names no file for bridge(s) {', '.join(map(str, missing))}")
    return {n: given[n] for n in names}


def open_bridges(
    bridges: tuple[tuple[str | None, str], ...],
    *,
    token_file: str | None = None,
    token_env: str | None = None,
    ca_file: str | None = None,
    consumer: str | None = None,
) -> dict[str | None, RemoteLog]:
    """A :class:`RemoteLog` per ``(name, HOST:PORT)`` for reader ``consumer``, credentials read here (on the driver).

    The token comes from ``token_file`` (one for all, or ``NAME=PATH,...``)
    or else the environment variable ``token_env`` (default
    ``AQUEDUCT_BRIDGE_TOKEN``); the CA certificate that signed the bridges'
    from ``ca_file`` (default: the system's trusted roots).
    """
    names = [name for name, _ in bridges]
    tokens = _per_name(token_file, names, "bridgeTokenFile")
    cas = _per_name(ca_file, names, "bridgeCA")
    env = token_env or DEFAULT_TOKEN_ENV
    logs: dict[str | None, RemoteLog] = {}
    for name, address in bridges:
        path = tokens[name]
        try:
            token = Path(path).read_text().strip() if path else os.environ.get(env, "").strip()
            ca = Path(cas[name]).read_bytes() if cas[name] else None  # type: ignore[arg-type]
        except OSError as e:
            raise BridgeCredentialError(f"cannot read {e.filename!r} for bridge {address}: {e.strerror}") from None
        if not token:
            where = f"file {path!r} is empty" if path else f"environment variable {env} is not set"
            raise BridgeCredentialError(
                f"no credential for bridge {address}: {where} (give bridgeTokenFile=PATH, "
                f"or set {DEFAULT_TOKEN_ENV} on the driver)"
            )
        logs[name] = RemoteLog(address, token, ca, consumer)
    return logs
