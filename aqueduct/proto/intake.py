"""Transport input, decoded: the intake of one connection.

QUIC delivers bytes on incoming unidirectional streams (each one sequence:
the prefix frames, then ROUTE_TO and that channel's frames) and DATAGRAMs
(ROUTE_TO plus one frame). The intake decodes them, holds routed input
until the peer's CONNECTION_HEADERS arrived (spec section 3), and returns
what it decoded as past-tense results (below); what a result does, and to
which channel a ROUTE_TO goes, is the connection's business, as in h11 and
quinn, whose parsers return events instead of calling back.

The results come out of a generator, one after the other, and each is
decoded after the connection acted on the one before. That order is the
protocol's: a CONNECTION_HEADERS decides whether the ROUTE_TO behind it in
the same chunk is held, a ROUTE_TO's route decides where the frames behind
it go, and a datagram's number must be checked after the datagrams before
it took effect.

The intake owns the fast paths: a routed stream's plain MESSAGEs and a read
batch's plain datagrams are checked and accepted here in one loop, without
a frame object each, and come out as one :class:`PlainRunAccepted` per run;
a routed stream's other frames come out as one :class:`FramesRouted` per
chunk. The hot path allocates per run, never per message.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aqueduct.proto.config import ProtoConfig
from aqueduct.proto.errors import RemoteProtocolError
from aqueduct.proto.handshake import Handshake
from aqueduct.proto.output import frame_record
from aqueduct.proto.receiver import ReceiverChannel
from aqueduct.proto.stats import ConnectionStats
from aqueduct.wire.chanid import Side
from aqueduct.wire.errors import WireError
from aqueduct.wire.frames import Frame, MessageFrame, RouteTo, Version, read_plain_messages
from aqueduct.wire.sequence import StreamSequenceDecoder, decode_datagram

if TYPE_CHECKING:
    from aqueduct.proto.channels import ChannelTable

_MAX_HELD_DATAGRAMS = 1024


class InStream:
    """Decoding state of one incoming stream (= one sequence)."""

    __slots__ = ("sid", "decoder", "started", "route", "ignore", "held")

    def __init__(self, sid: int, decoder: StreamSequenceDecoder) -> None:
        self.sid = sid
        self.decoder = decoder
        self.started = False
        self.route: int | None = None
        self.ignore = False  # rest of the sequence is for a channel we ignore
        self.held: list[Frame] | None = None  # routed frames waiting for the peer's headers

    def routed_to(self, chanid: int | None) -> None:
        """The connection's answer to this sequence's ROUTE_TO: a channel, or None to ignore it."""
        if chanid is None:
            self.ignore = True
        else:
            self.route = chanid


# ---------------------------------------------------------------- results


@dataclass(slots=True)
class PrefixFrameReceived:
    """VERSION, ACK_VERSION or CONNECTION_HEADERS: a frame of the connection, not of a channel."""

    frame: Frame


@dataclass(slots=True)
class RouteToReceived:
    """A sequence's ROUTE_TO ``chanid``; the connection answers with ``stream.routed_to()``.

    Until it has, the stream's later frames stay undecided (the generator
    resumes only after the answer).
    """

    stream: InStream
    chanid: int


@dataclass(slots=True)
class FramesRouted:
    """Frames of a routed sequence, in order, for channel ``chanid`` (its ROUTE_TO was answered)."""

    chanid: int
    frames: list[Frame]


@dataclass(slots=True)
class DatagramReceived:
    """A datagram's one frame, behind ROUTE_TO ``chanid`` (not answered yet: datagrams route each)."""

    chanid: int
    frame: Frame


@dataclass(slots=True)
class PlainRunAccepted:
    """Plain MESSAGEs for receiver ``channel``, numbers checked and accepted, not delivered yet.

    ``fresh``: no ack was due on the channel before the run (the connection
    arms its timer only then). The lists become the delivered event's.
    """

    channel: ReceiverChannel
    payloads: list[bytes]
    costs: list[int]
    fresh: bool


Decoded = PrefixFrameReceived | RouteToReceived | FramesRouted | DatagramReceived | PlainRunAccepted


class Intake:
    """Decodes incoming streams and datagrams into results (see the module docstring)."""

    def __init__(
        self,
        side: Side,
        config: ProtoConfig,
        handshake: Handshake,
        table: ChannelTable,
        stats: ConnectionStats,
    ) -> None:
        self.side = side
        self.config = config
        self._log = config.frame_log
        self._hs = handshake
        self._channels = table.live
        self._stats = stats
        self._in: dict[int, InStream] = {}
        self._held: list[InStream] = []  # routed sequences waiting for the peer's headers
        self._held_datagrams: list[list[Frame]] = []

    def stream_data(self, stream_id: int, data: bytes, end_stream: bool, now: float) -> Iterator[Decoded]:
        """Bytes of an incoming stream, decoded (raises on a violation, when iterated).

        On a routed sequence, the plain MESSAGEs leading the chunk come first,
        accepted as one run; the frames after them come as one
        ``FramesRouted``. Before the route, one result per frame.
        """
        st = self._in.get(stream_id)
        if st is None:
            if not stream_id & 2:
                raise RemoteProtocolError(
                    f"stream {stream_id}: bidirectional streams are not used by Aqueduct"
                )
            if (stream_id & 1) == self.side:
                raise RemoteProtocolError(f"stream {stream_id}: data on a stream we opened")
            st = self._in[stream_id] = InStream(stream_id, StreamSequenceDecoder(self.config.limits))
        elif st.route is not None and self._log is None:
            joined = st.decoder.routed_input(data)
            if joined is not None:
                run, data = self._stream_run(st.route, joined, now)
                if run is not None:
                    yield run
        frames = st.decoder.feed(data) if data else ()
        if end_stream:
            st.decoder.end()
            del self._in[stream_id]
        log = self._log
        for i, frame in enumerate(frames):
            if log is not None:  # one result per frame, logged as it is taken
                log(frame_record("received", f"stream {st.sid}", frame))
            elif st.route is not None:  # the hot path: the rest of a routed chunk, whole
                yield FramesRouted(st.route, frames if i == 0 else frames[i:])
                return
            result = self._sequence_frame(st, frame)
            if result is not None:
                yield result

    def stream_reset(self, stream_id: int) -> None:
        """A reset incoming stream: a partial frame is dropped, whole frames stay processed."""
        self._in.pop(stream_id, None)

    def _stream_run(
        self, chanid: int, data: bytes | bytearray, now: float
    ) -> tuple[PlainRunAccepted | None, bytes | bytearray]:
        """Accept the plain MESSAGEs leading ``data`` in one step; return them and the rest.

        The per-message path builds a frame and an event per message; on an
        ORDERED stream nearly every message is plain (see
        ``read_plain_messages``), so a whole chunk becomes one run. Oneshot
        channels and anything unusual take the general path.
        """
        ch = self._channels.get(chanid)
        if ch is None or ch.is_sender or ch.oneshot:
            return None, data
        first, payloads, costs, pos = read_plain_messages(data, 0, self.config.limits.max_payload_bytes)
        if not payloads:
            return None, data
        fresh = ch.ack_due is None
        ch.accept_reliable(first, len(payloads), now)
        return PlainRunAccepted(ch, payloads, costs, fresh), data[pos:]

    def datagrams(self, datas: Iterable[bytes], now: float) -> Iterator[Decoded]:
        """QUIC DATAGRAMs read together, in order, decoded (a violation raises, when iterated).

        A UDP packet carries several datagrams and the runtime hands a whole
        read batch over in one call, because the per-datagram chain of calls
        cost more than the rest of the receive path. Consecutive plain
        datagrams of one channel (``_plain_receiver``: ROUTE_TO and one plain
        MESSAGE) are checked one by one (numbers, late drops, counters) but
        come out as one ``PlainRunAccepted``: what the event queue would have
        joined into one ``MessagesReceived`` anyway. Any other datagram
        first ends the run gathered so far, then comes out alone, so results
        keep their order. A violation first returns the run accepted before
        the violating datagram, then raises; the rest is never read.

        One result per run instead of one per datagram changes nothing
        else: ``fresh`` is decided before the run's first accepted datagram
        (accepting sets ``ack_due``, only a flush clears it), the deadline
        the connection schedules does not depend on unreliable numbers,
        and a channel that got FINISH_SENDER cannot complete through a
        datagram (completion waits for a flush to move the nack cursor), so
        delivering cannot end the run's channel midway.
        """
        route_tag, message_tag = RouteTo.TAG, MessageFrame.TAG
        max_payload = self.config.limits.max_payload_bytes
        stats = self._stats
        run: ReceiverChannel | None = None  # the channel of the plain run being gathered
        run_id = -1  # its chanid (-1: no run)
        payloads: list[bytes] = []  # accepted in the run, not yet returned
        costs: list[int] = []
        fresh = False  # no ack was due on ``run`` before the run
        violation: RemoteProtocolError | WireError | None = None
        try:
            for data in datas:
                ch: ReceiverChannel | None = None  # where this datagram goes plain, if it does
                if len(data) > 2 and data[0] == route_tag and data[2] == message_tag:
                    chanid = data[1]
                    ch = run if chanid == run_id else self._plain_receiver(chanid)
                    if ch is not None:
                        first, more, more_costs, end = read_plain_messages(data, 2, max_payload)
                        # (one MESSAGE: a second one is the general path's violation)
                        if end != len(data) or len(more) != 1:
                            ch = None
                if ch is not run:  # the run ends here
                    if payloads and run is not None:
                        yield PlainRunAccepted(run, payloads, costs, fresh)
                        payloads, costs = [], []  # (the result keeps the returned lists)
                    run, run_id = ch, -1 if ch is None else data[1]
                    fresh = ch is not None and ch.ack_due is None
                if ch is None:
                    result = self._general_datagram(data)
                    if result is not None:
                        yield result
                    continue
                stats.datagrams_received += 1
                if ch.accept_unreliable(first, now):
                    payloads += more
                    costs += more_costs
        except (RemoteProtocolError, WireError) as e:
            violation = e
        if payloads and run is not None:  # accepted before the end (or before a violation)
            yield PlainRunAccepted(run, payloads, costs, fresh)
        if violation is not None:
            raise violation

    def _plain_receiver(self, chanid: int) -> ReceiverChannel | None:
        """The receiver a plain datagram ROUTE_TO ``chanid`` may go to without frame objects.

        The general path checks the same rules in ``decode_datagram`` and the
        connection's routing; this one needs none of them: the handshake is
        done, no frame log wants records, a VERSION arrived (so none is
        required), and the channel is a receiver we hold, not oneshot (whose
        message may not be a datagram), already routed (the connection's
        route has nothing to do). None sends the datagram down the general
        path.
        """
        hs = self._hs
        if chanid >= 0x80 or self._log is not None or not hs.done or not hs.got_version:
            return None
        ch = self._channels.get(chanid)
        if ch is None or ch.is_sender or ch.oneshot or not ch.routed:
            return None
        return ch

    def _general_datagram(self, data: bytes) -> DatagramReceived | None:
        """Any datagram, decoded into frames (raises on a violation); None while it is held."""
        frames = decode_datagram(data, self.config.limits)
        self._stats.datagrams_received += 1
        self._hs.sequence_started(frames[0])
        if isinstance(frames[0], Version):
            self._hs.version_received()
        if not self._hs.done:
            if len(self._held_datagrams) < _MAX_HELD_DATAGRAMS:
                self._held_datagrams.append(frames)
            return None
        return self._datagram_frames(frames)

    def _sequence_frame(self, st: InStream, frame: Frame) -> Decoded | None:
        """One frame of an incoming stream sequence, in order: its result, or None if none is due."""
        if st.route is not None:
            return FramesRouted(st.route, [frame])
        if st.held is not None:
            st.held.append(frame)
            return None
        if st.ignore:
            return None
        if not st.started:
            st.started = True
            self._hs.sequence_started(frame)
        if type(frame) is RouteTo:
            if not self._hs.done:
                st.held = [frame]
                self._held.append(st)
                return None
            return RouteToReceived(st, frame.chanid)
        return PrefixFrameReceived(frame)

    def release_held(self) -> Iterator[Decoded]:
        """The peer's headers arrived: the routed input that waited for them, decoded in order."""
        held, self._held = self._held, []
        for st in held:
            frames, st.held = st.held or [], None
            for frame in frames:
                result = self._sequence_frame(st, frame)  # (logged when it arrived)
                if result is not None:
                    yield result
        datagrams, self._held_datagrams = self._held_datagrams, []
        for frames in datagrams:
            yield self._datagram_frames(frames)

    def _datagram_frames(self, frames: list[Frame]) -> DatagramReceived:
        route, msg = frames[-2], frames[-1]
        if self._log is not None:
            self._log(frame_record("received", "datagram", msg) | {"chanid": route.chanid})
        return DatagramReceived(route.chanid, msg)
