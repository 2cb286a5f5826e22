"""What every connector session machine shares, so each side only says what differs.

Three sans-IO machines speak a connector wire: the connector side and the
worker side of the seed protocol (:mod:`.connector_session`,
:mod:`.worker_session`) and the worker side of Wallaroo v3
(:mod:`.wallaroo.worker_session`). They follow one shape:

* a **receive table**, frame type -> (connection states it is legal in,
  handler name); a type absent from it is a frame this side may never
  receive;
* **input** is split into whole frames; the frames before a bad one are
  handled first, then the bad one ends the session (spec: everything before
  it is processed);
* **errors**: a handler that finds a violation calls ``raise
  self._fail(reason)``: ERROR ``reason`` is queued for the peer, the
  session ends and input processing stops; an ERROR from the peer ends it
  the same way. Either way the caller gets the events of everything
  accepted before, then ``SessionEnded``;
* **output** is taken with ``data_to_send()``, **events** come back from
  the call that caused them.

Subclasses give the codec (``FrameSplitter``, ERROR frame, frame names) and
how output is queued (the worker sends bytes; the connector keeps each
frame with its bytes, because over Aqueduct NOTIFY and MESSAGE frames are
routed to different channels).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from aqueduct.auth.identity import Identity
from aqueduct.connector.credentials import CredentialCheck, admit_hello
from aqueduct.connector.events import SessionEnded
from aqueduct.connector.states import CONNECTION_TRANSITIONS, ConnectionState, step
from aqueduct.proto.errors import LocalProtocolError

C = ConnectionState
EventT = TypeVar("EventT")


class SessionOver(Exception):  # noqa: N818 - control flow, not a failure
    """Internal: stop processing input, the session just ended."""


class Splitter(Protocol):
    """An incremental frame decoder (each codec has one)."""

    def push(self, data: bytes) -> None: ...

    def drain(self) -> tuple[list[Any], Exception | None]: ...

    @property
    def buffered(self) -> int: ...


class SessionMachine(Generic[EventT]):
    """The shared skeleton; see the module docstring."""

    #: frame type -> (states it is legal in, handler name)
    RECEIVE_TABLE: ClassVar[dict[type, tuple[frozenset[ConnectionState], str]]]
    #: who this side is, as the error for a frame it may never receive says it
    ROLE: ClassVar[str]

    def __init__(self, splitter: Splitter, frame_name: Callable[[Any], str]) -> None:
        self.state = C.CONNECTED
        self._splitter = splitter
        self._frame_name = frame_name
        self._events: list[EventT] = []
        #: RECEIVE_TABLE as dispatch uses it once per frame: bound handlers, and the
        #: states as a tuple (membership by identity; a frozenset hashes the enum in Python).
        self._handlers = {
            kind: (tuple(states), getattr(self, name))
            for kind, (states, name) in self.RECEIVE_TABLE.items()
        }

    @property
    def ended(self) -> bool:
        """True once ERROR / RESTART was sent or received or the transport closed."""
        return self.state in (C.ERROR, C.DISCONNECTED)

    def connection_lost(self) -> list[EventT]:
        """The transport ended (after ERROR / RESTART that is no news)."""
        if self.ended:
            self.state = C.DISCONNECTED
            return []
        self.state = step(CONNECTION_TRANSITIONS, self.state, "closed")
        return [SessionEnded("connection closed", "closed")]  # type: ignore[list-item]

    def fail(self, reason: str) -> list[EventT]:
        """End the session with ERROR ``reason`` (this side cannot go on)."""
        if self.ended:
            return []
        self._fail(reason)
        return self._take_events()

    # ------------------------------------------------------------ input

    def _feed(self, data: bytes, *, whole: bool = False) -> list[EventT]:
        """Handle every whole frame in ``data``; ``whole``: it must end on a frame boundary."""
        if self.ended:
            return []  # the spec: anything after ERROR / RESTART is discarded
        self._splitter.push(data)
        frames, bad_frame = self._splitter.drain()
        frames, refused = self._admit(frames)
        try:
            self._handle(frames)  # those before a bad frame are handled first
            if refused is not None:
                raise self._fail(refused)
            if bad_frame is not None:
                raise self._fail(str(bad_frame))
            if whole and self._splitter.buffered:
                raise self._fail(
                    f"payload ends inside a frame ({self._splitter.buffered} bytes left)"
                )
            self._input_handled()
        except SessionOver:
            pass
        return self._take_events()

    def _handle(self, frames: list[Any]) -> None:
        """Handle a chunk's frames in order, each by its receive table entry."""
        dispatch = self._dispatch
        for frame in frames:
            dispatch(frame)

    def _dispatch(self, frame: Any) -> None:
        entry = self._handlers.get(type(frame))
        if entry is None:
            raise self._fail(f"{self._frame_name(frame)} frame may not be sent to a {self.ROLE}")
        states, handler = entry
        if self.state not in states:
            raise self._fail(
                f"{self._frame_name(frame)} frame not allowed in state {self.state.value}"
            )
        handler(frame)

    def _on_error(self, error: Any) -> None:
        """The peer sent ERROR: the session is over."""
        self._emit_gathered()
        self.state = step(CONNECTION_TRANSITIONS, self.state, "error")
        self._events.append(SessionEnded(error.reason, "peer"))  # type: ignore[arg-type]
        raise SessionOver()

    def _fail(self, reason: str) -> SessionOver:
        """Queue ERROR ``reason`` and end the session; the caller raises the result."""
        self._emit_gathered()
        self._send_error(reason)
        self.state = step(CONNECTION_TRANSITIONS, self.state, "error")
        self._events.append(SessionEnded(reason, "local"))  # type: ignore[arg-type]
        return SessionOver()

    # ------------------------------------------------------------ what a side adds

    def _send_error(self, reason: str) -> None:
        """Queue this codec's ERROR frame."""
        raise NotImplementedError

    def _admit(self, frames: list[Any]) -> tuple[list[Any], str | None]:
        """The frames this input may carry, and the reason the first one it may not fails.

        One pass over a chunk rather than a check per dispatch: a worker's
        stream channel carries nothing but its stream's MESSAGE frames.
        """
        return frames, None

    def _input_handled(self) -> None:
        """A chunk of input was handled without ending the session (e.g. return credits)."""

    def _emit_gathered(self) -> None:
        """Turn anything gathered (a run of records) into events, before an event that follows it."""

    def _take_events(self) -> list[EventT]:
        self._emit_gathered()
        events, self._events = self._events, []
        return events


class WorkerMachine(SessionMachine[EventT]):
    """The worker side both wires share: the bytes queued for the transport, credits, and RESTART.

    The connector's wire and Wallaroo's v3 wire admit HELLO's credential
    alike (:meth:`_admit_hello`), answer with frames written
    to one buffer the transport drains, and end a session by RESTART the
    same way; only the RESTART frame and what it does to a stream differ
    (:meth:`_restart`'s argument and :meth:`_terminate_streams`).
    """

    def __init__(self, splitter: Splitter, frame_name: Callable[[Any], str]) -> None:
        super().__init__(splitter, frame_name)
        self._out = bytearray()
        self._credits = 0  # credits the connector may still spend
        #: the subject of the client certificate TLS verified (set by the transport), if any
        self.certificate_subject: str | None = None
        #: the transport admits only producers with a verified client certificate (set by it)
        self.certificate_required = False
        #: who HELLO admitted (None before): what the sink checks each NOTIFY against
        self.identity: Identity | None = None

    def _admit_hello(self, cookie: bytes, check: CredentialCheck | None, hello: Any) -> None:
        """Admit HELLO's credential (:func:`~aqueduct.connector.credentials.admit_hello`) or end with its ERROR."""
        admitted = admit_hello(
            cookie, check, hello.cookie, self.certificate_subject, hello.program_name, hello.instance_name,
            self.certificate_required,
        )  # fmt: skip
        if isinstance(admitted, str):
            raise self._fail(admitted)
        self.identity = admitted

    def data_to_send(self) -> bytes:
        """Bytes queued for the transport since the last call."""
        data = bytes(self._out)
        self._out.clear()
        return data

    def _restart(self, frame: bytes) -> list[EventT]:
        """Send the encoded RESTART ``frame``: every stream terminates, the connector reconnects."""
        if self.state is not C.STREAMING:
            raise LocalProtocolError(f"RESTART not allowed in state {self.state.value}")
        self._out += frame
        self._terminate_streams()
        self.state = step(CONNECTION_TRANSITIONS, self.state, "restart")
        return [SessionEnded("restart requested", "restart")]  # type: ignore[list-item]

    def _terminate_streams(self) -> None:
        """What RESTART does to this wire's streams."""
        raise NotImplementedError

    def _spend_credit(self) -> None:
        """A frame that costs a credit arrived: one fewer, or ERROR if none was left."""
        if self._credits == 0:
            raise self._fail("credit exceeded")
        self._credits -= 1
