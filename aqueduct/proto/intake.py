"""Transport input, turned into routed frames: the intake of one connection.

QUIC delivers bytes on incoming unidirectional streams (each one sequence:
the prefix frames, then ROUTE_TO and that channel's frames) and DATAGRAMs
(ROUTE_TO plus one frame). The intake decodes them, holds routed input
until the peer's CONNECTION_HEADERS arrived (spec section 3), and hands each
frame over with the channel it is routed to. It owns the fast paths: a
routed stream's plain MESSAGEs and a read batch's plain datagrams become
runs without a frame object each. What a routed frame does is the
connection's business (the callbacks given at construction).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from aqueduct.proto.config import ProtoConfig
from aqueduct.proto.errors import RemoteProtocolError
from aqueduct.proto.handshake import Handshake
from aqueduct.proto.output import frame_record
from aqueduct.proto.receiver import ReceiverChannel
from aqueduct.proto.stats import ConnectionStats
from aqueduct.wire.chanid import Side
from aqueduct.wire.errors import WireError
from aqueduct.wire.frames import Frame, Message, RouteTo, Version, read_plain_messages
from aqueduct.wire.sequence import StreamSequenceDecoder, decode_datagram

if TYPE_CHECKING:
    from aqueduct.proto.channels import ChannelTable

_MAX_HELD_DATAGRAMS = 1024


class _InStream:
    """Decoding state of one incoming stream (= one sequence)."""

    __slots__ = ("sid", "decoder", "started", "route", "ignore", "held")

    def __init__(self, sid: int, decoder: StreamSequenceDecoder) -> None:
        self.sid = sid
        self.decoder = decoder
        self.started = False
        self.route: int | None = None
        self.ignore = False  # rest of the sequence is for a channel we ignore
        self.held: list[Frame] | None = None  # routed frames waiting for the peer's headers


class Intake:
    """Decodes incoming streams and datagrams into routed frames (see the module docstring)."""

    def __init__(
        self,
        side: Side,
        config: ProtoConfig,
        handshake: Handshake,
        table: ChannelTable,
        stats: ConnectionStats,
        *,
        terminated: Callable[[], bool],
        route: Callable[[int], int | None],
        routed: Callable[[int, Frame, bool, float], None],
        receive_plain_run: Callable[[int, bytes | bytearray, float], bytes | bytearray],
        deliver_plain: Callable[[ReceiverChannel, list[bytes], list[int], bool, float], None],
        prefix_frame: Callable[[Frame, float], None],
        violation: Callable[[str], None],
    ) -> None:
        self.side = side
        self.config = config
        self._log = config.frame_log
        self._hs = handshake
        self._channels = table.live
        self._stats = stats
        self._terminated = terminated
        self._route = route
        self._routed = routed
        self._receive_plain_run = receive_plain_run
        self._deliver_plain = deliver_plain
        self._prefix_frame = prefix_frame
        self._violation = violation
        self._in: dict[int, _InStream] = {}
        self._held: list[_InStream] = []  # routed sequences waiting for the peer's headers
        self._held_datagrams: list[list[Frame]] = []

    def receive_stream_data(self, stream_id: int, data: bytes, end_stream: bool, now: float) -> None:
        if self._terminated():
            return
        try:
            st = self._in.get(stream_id)
            if st is None:
                if not stream_id & 2:
                    raise RemoteProtocolError(
                        f"stream {stream_id}: bidirectional streams are not used by Aqueduct"
                    )
                if (stream_id & 1) == self.side:
                    raise RemoteProtocolError(f"stream {stream_id}: data on a stream we opened")
                st = self._in[stream_id] = _InStream(
                    stream_id, StreamSequenceDecoder(self.config.limits)
                )
            elif st.route is not None and self._log is None:
                joined = st.decoder.routed_input(data)
                if joined is not None:
                    data = self._receive_plain_run(st.route, joined, now)
            frames = st.decoder.feed(data) if data else ()
            if end_stream:
                st.decoder.end()
                del self._in[stream_id]
            if self._log is not None:
                for frame in frames:
                    self._stream_frame(st, frame, now)
                return
            routed = self._routed
            for frame in frames:
                if st.route is not None:  # _dispatch's hot path, one call less per message
                    routed(st.route, frame, False, now)
                else:
                    self._dispatch(st, frame, now)
        except (RemoteProtocolError, WireError) as e:
            self._violation(str(e))

    def receive_stream_reset(self, stream_id: int) -> None:
        """A reset incoming stream: a partial frame is dropped, whole frames stay processed."""
        self._in.pop(stream_id, None)

    def receive_datagrams(self, datas: Iterable[bytes], now: float) -> None:
        """QUIC DATAGRAMs read together, in order, exactly as ``receive_datagram`` on each.

        A UDP packet carries several datagrams and the runtime hands a whole
        read batch over in one call, because the per-datagram chain of calls
        cost more than the rest of the receive path. Consecutive plain
        datagrams of one channel (``_plain_receiver``: ROUTE_TO and one plain
        MESSAGE) are checked one by one (numbers, late drops, counters) but
        delivered as one run, one ``_deliver_plain``: what it would have
        joined into one ``MessageRunReceived`` anyway. Anything else first
        delivers the run gathered so far, then takes the general path, so
        events keep their order. A violation delivers the run accepted before
        the violating datagram, then closes and ignores the rest.

        Delivering once per run instead of once per datagram changes nothing
        else: ``fresh`` is decided before the run's first accepted datagram
        (accepting sets ``ack_due``, only a flush clears it), the deadline
        ``_after_delivery`` schedules does not depend on unreliable numbers,
        and a channel that got FINISH_SENDER cannot complete through a
        datagram (completion waits for a flush to move the nack cursor), so
        delivering cannot end the run's channel midway.
        """
        if self._terminated():
            return
        route_tag, message_tag = RouteTo.TAG, Message.TAG
        max_payload = self.config.limits.max_payload_bytes
        stats = self._stats
        run: ReceiverChannel | None = None  # the channel of the plain run being gathered
        run_id = -1  # its chanid (-1: no run)
        payloads: list[bytes] = []  # accepted in the run, not yet delivered
        costs: list[int] = []
        fresh = False  # no ack was due on ``run`` before the run (see _after_delivery)
        violation: str | None = None
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
                        self._deliver_plain(run, payloads, costs, fresh, now)
                        payloads, costs = [], []  # (the event keeps the delivered lists)
                    run, run_id = ch, -1 if ch is None else data[1]
                    fresh = ch is not None and ch.ack_due is None
                if ch is None:
                    self._receive_general_datagram(data, now)
                    continue
                stats.datagrams_received += 1
                if ch.accept_unreliable(first, now):
                    payloads += more
                    costs += more_costs
        except (RemoteProtocolError, WireError) as e:
            violation = str(e)
        if payloads and run is not None:  # accepted before the end (or before a violation)
            self._deliver_plain(run, payloads, costs, fresh, now)
        if violation is not None:
            self._violation(violation)

    def _plain_receiver(self, chanid: int) -> ReceiverChannel | None:
        """The receiver a plain datagram ROUTE_TO ``chanid`` may go to without frame objects.

        The general path checks the same rules in ``decode_datagram`` /
        ``_routed``; this one needs none of them: the handshake is done, no
        frame log wants records, a VERSION arrived (so none is required),
        and the channel is a receiver we hold, not oneshot (whose message
        may not be a datagram), already routed (``_route`` has nothing to
        do). None sends the datagram down the general path.
        """
        hs = self._hs
        if chanid >= 0x80 or self._log is not None or not hs.done or not hs.got_version:
            return None
        ch = self._channels.get(chanid)
        if ch is None or ch.is_sender or ch.oneshot or not ch.routed:
            return None
        return ch

    def _receive_general_datagram(self, data: bytes, now: float) -> None:
        """Any datagram, decoded into frames (raises on a violation)."""
        frames = decode_datagram(data, self.config.limits)
        self._stats.datagrams_received += 1
        self._hs.sequence_started(frames[0])
        if isinstance(frames[0], Version):
            self._hs.version_received()
        if not self._hs.done:
            if len(self._held_datagrams) < _MAX_HELD_DATAGRAMS:
                self._held_datagrams.append(frames)
            return
        self._datagram_frames(frames, now)

    def _stream_frame(self, st: _InStream, frame: Frame, now: float) -> None:
        if self._log is not None:
            self._log(frame_record("received", f"stream {st.sid}", frame))
        self._dispatch(st, frame, now)

    def _dispatch(self, st: _InStream, frame: Frame, now: float) -> None:
        """One frame of an incoming stream sequence, in order."""
        if st.route is not None:  # the hot path: a routed frame on a routed sequence
            self._routed(st.route, frame, False, now)
            return
        if st.held is not None:
            st.held.append(frame)
            return
        if st.ignore:
            return
        if not st.started:
            st.started = True
            self._hs.sequence_started(frame)
        if type(frame) is RouteTo:
            if not self._hs.done:
                st.held = [frame]
                self._held.append(st)
                return
            chanid = self._route(frame.chanid)
            if chanid is None:
                st.ignore = True
            else:
                st.route = chanid
        else:
            self._prefix_frame(frame, now)

    def release_held(self, now: float) -> None:
        """The peer's headers arrived: process the routed frames that waited for them."""
        held, self._held = self._held, []
        for st in held:
            frames, st.held = st.held or [], None
            for frame in frames:
                if self._terminated():
                    return
                self._dispatch(st, frame, now)  # (logged when it arrived)
        datagrams, self._held_datagrams = self._held_datagrams, []
        for frames in datagrams:
            self._datagram_frames(frames, now)

    def _datagram_frames(self, frames: list[Frame], now: float) -> None:
        route, msg = frames[-2], frames[-1]
        if self._log is not None:
            self._log(frame_record("received", "datagram", msg) | {"chanid": route.chanid})
        chanid = self._route(route.chanid)
        if chanid is not None:
            self._routed(chanid, msg, True, now)

