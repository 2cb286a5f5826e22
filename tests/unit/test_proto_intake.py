"""The intake returns what it decoded, lazily, and the connection's answers steer what comes next.

These drive :class:`~aqueduct.proto.intake.Intake` on its own (the way
``Connection`` does, answering each result before taking the next), to
pin its contract: results in the protocol's order, one result per run or
chunk on the hot paths, and a violation raised after the run accepted
before it.
"""

from __future__ import annotations

import pytest

from aqueduct.proto.channels import ChannelTable
from aqueduct.proto.config import ProtoConfig
from aqueduct.proto.errors import RemoteProtocolError
from aqueduct.proto.handshake import Handshake
from aqueduct.proto.intake import (
    DatagramReceived,
    FramesRouted,
    Intake,
    PlainRunAccepted,
    PrefixFrameReceived,
    RouteToReceived,
)
from aqueduct.proto.output import Output
from aqueduct.proto.receiver import ReceiverChannel
from aqueduct.proto.stats import ConnectionStats
from aqueduct.wire.chanid import ENTRYPOINT, Side
from aqueduct.wire.frames import (
    VERSION_STRING,
    ConnectionHeaders,
    FinishSender,
    MessageFrame,
    RouteTo,
    Version,
    encode_frame,
)

CLIENT_STREAM = 2  # the first unidirectional stream a client opens


def _intake() -> tuple[Intake, Handshake, ChannelTable]:
    """A server's intake holding the receiver of the entry point."""
    config = ProtoConfig()
    hs = Handshake(())
    table = ChannelTable(Side.SERVER)
    stats = ConnectionStats()
    out = Output(False, hs.prefix, None)
    table.add(ReceiverChannel(ENTRYPOINT, config.window, 0.01, 0.01, lambda: 1.0, out, stats))
    return Intake(Side.SERVER, config, hs, table, stats), hs, table


def _bytes(*frames) -> bytes:
    return b"".join(encode_frame(f) for f in frames)


def _msg(num: int, payload: bytes = b"p", headers: tuple = ()) -> MessageFrame:
    return MessageFrame(num, headers, (), payload)


def _answer(results, hs: Handshake, routes: dict[int, int | None]) -> list:
    """Take every result as the connection would: act on each before asking for the next."""
    taken = []
    for result in results:
        taken.append(result)
        if isinstance(result, PrefixFrameReceived) and isinstance(result.frame, Version):
            hs.version_received()
        elif isinstance(result, PrefixFrameReceived) and isinstance(result.frame, ConnectionHeaders):
            hs.headers_received(result.frame.headers)
        elif isinstance(result, RouteToReceived):
            result.stream.routed_to(routes.get(result.chanid))
    return taken


def test_headers_then_route_in_one_chunk_is_routed_not_held():
    """The ROUTE_TO behind CONNECTION_HEADERS is decoded after the connection took the headers."""
    intake, hs, _ = _intake()
    data = _bytes(Version(VERSION_STRING), ConnectionHeaders(()), RouteTo(ENTRYPOINT), _msg(0, headers=(("k", b"v"),)))
    taken = _answer(intake.stream_data(CLIENT_STREAM, data, False, 0.0), hs, {ENTRYPOINT: ENTRYPOINT})
    assert [type(r) for r in taken] == [PrefixFrameReceived, PrefixFrameReceived, RouteToReceived, FramesRouted]
    assert taken[-1].chanid == ENTRYPOINT and taken[-1].frames[0].headers == (("k", b"v"),)


def test_routed_input_waits_for_the_headers_then_comes_out_in_order():
    intake, hs, _ = _intake()
    routed = _bytes(Version(VERSION_STRING), RouteTo(ENTRYPOINT), FinishSender(0))
    taken = _answer(intake.stream_data(CLIENT_STREAM, routed, False, 0.0), hs, {})
    assert [type(r) for r in taken] == [PrefixFrameReceived]  # the routed frames are held
    hs.headers_received(())
    taken = _answer(intake.release_held(), hs, {ENTRYPOINT: ENTRYPOINT})
    assert [type(r) for r in taken] == [RouteToReceived, FramesRouted]
    assert taken[1].frames == [FinishSender(0)]


def test_an_ignored_route_drops_the_rest_of_the_sequence():
    intake, hs, _ = _intake()
    data = _bytes(Version(VERSION_STRING), ConnectionHeaders(()), RouteTo(9), FinishSender(0))
    taken = _answer(intake.stream_data(CLIENT_STREAM, data, False, 0.0), hs, {9: None})
    assert [type(r) for r in taken] == [PrefixFrameReceived, PrefixFrameReceived, RouteToReceived]
    assert _answer(intake.stream_data(CLIENT_STREAM, _bytes(FinishSender(0)), False, 0.0), hs, {}) == []


def test_a_routed_chunk_is_one_run_and_one_frames_result():
    """Plain messages leading a chunk are accepted as one run; the frames behind them come whole."""
    intake, hs, table = _intake()
    head = _bytes(Version(VERSION_STRING), ConnectionHeaders(()), RouteTo(ENTRYPOINT))
    _answer(intake.stream_data(CLIENT_STREAM, head, False, 0.0), hs, {ENTRYPOINT: ENTRYPOINT})
    chunk = _bytes(*(_msg(n) for n in range(5)), _msg(5, headers=(("k", b"v"),)), _msg(6))
    taken = _answer(intake.stream_data(CLIENT_STREAM, chunk, False, 0.0), hs, {})
    assert [type(r) for r in taken] == [PlainRunAccepted, FramesRouted]
    run, rest = taken
    assert run.channel is table.live[ENTRYPOINT] and run.payloads == [b"p"] * 5 and run.fresh
    assert [f.num for f in rest.frames] == [5, 6]


def test_plain_datagrams_come_out_as_one_run_then_the_violation():
    intake, hs, table = _intake()
    head = _bytes(Version(VERSION_STRING), ConnectionHeaders(()), RouteTo(ENTRYPOINT))
    _answer(intake.stream_data(CLIENT_STREAM, head, False, 0.0), hs, {ENTRYPOINT: ENTRYPOINT})
    table.live[ENTRYPOINT].routed = True
    datagrams = [_bytes(RouteTo(ENTRYPOINT), _msg(n, b"d%d" % n)) for n in range(3)]
    bad = _bytes(RouteTo(ENTRYPOINT), _msg(1))  # a duplicate number
    results = intake.datagrams([*datagrams, bad, datagrams[0]], 0.0)
    run = next(results)
    assert type(run) is PlainRunAccepted and run.payloads == [b"d0", b"d1", b"d2"]
    with pytest.raises(RemoteProtocolError, match="duplicate unreliable message number 1"):
        next(results)


def test_a_general_datagram_waits_for_the_connection_to_route_it():
    intake, hs, _ = _intake()
    hs.headers_received(())
    data = _bytes(Version(VERSION_STRING), RouteTo(ENTRYPOINT), _msg(0, headers=(("k", b"v"),)))
    taken = list(intake.datagrams([data], 0.0))
    assert taken == [DatagramReceived(ENTRYPOINT, _msg(0, headers=(("k", b"v"),)))]
