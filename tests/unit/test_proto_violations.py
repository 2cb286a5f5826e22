"""Raw frames in: spec section 6 violations (close code 1, clear reason) and section 5 routing.

Each test crafts raw bytes with the ``aqueduct.wire`` encoders, feeds them to
a real ``Connection`` that finished its handshake, and checks the actions
(the close, echoes, FORGET_CHANNEL, resets) and events it answers with.
"""

from __future__ import annotations

import pytest

from aqueduct.proto.config import ProtoConfig
from aqueduct.proto.connection import ConnectionMachine
from aqueduct.proto.events import (
    ChannelLost,
    ConnectionCloseQueued,
    ConnectionTerminated,
    MessagesReceived,
    StreamDataQueued,
    StreamResetQueued,
)
from aqueduct.wire import (
    AckNackUnreliable,
    AckReliable,
    AckVersion,
    AttachmentRef,
    CancelSender,
    CloseReceiver,
    ConnectionHeaders,
    Dequeued,
    FinishSender,
    ForgetChannel,
    Limits,
    MessageFrame,
    RouteTo,
    SentUnreliable,
    Side,
    StreamSequenceDecoder,
    Version,
    encode_frame,
    encode_sequence,
    make_chanid,
)
from aqueduct.wire.modes import Mode

CLIENT_SENDS = make_chanid(Side.CLIENT, Side.CLIENT, False, 1)  # client-created, client sends
SERVER_SENDS = make_chanid(Side.SERVER, Side.SERVER, False, 0)  # server-created, server sends


def msg(num: int, attachments=(), payload: bytes = b"x") -> MessageFrame:
    return MessageFrame(num, (), tuple(attachments), payload)


class Peer:
    """A real Connection under test plus a scripted peer that writes raw bytes to it."""

    def __init__(self, is_client: bool = False, config: ProtoConfig | None = None) -> None:
        self.conn = ConnectionMachine(is_client, config)
        self.next_sid = 3 if is_client else 2  # the scripted peer's stream ids
        if is_client:
            self.conn.initiate(0.0)
            self.send([Version(), AckVersion(), ConnectionHeaders(())])
        else:
            self.send([Version(), ConnectionHeaders(())])
            self.send([AckVersion()])  # the scripted client got our VERSION
        self.actions = self.conn.transmit()

    def send(self, frames, end: bool = True) -> int:
        sid = self.next_sid
        self.next_sid += 4
        self.raw(sid, encode_sequence(frames), end)
        return sid

    def raw(self, sid: int, data: bytes, end: bool = True) -> None:
        self.conn.receive_stream_data(sid, data, end, 0.0)

    def close_reason(self) -> str:
        """The reason of the code-1 close the connection queued (fails if there is none)."""
        closes = [a for a in self.conn.transmit() if isinstance(a, ConnectionCloseQueued)]
        assert closes, "expected a PROTOCOL_VIOLATION close"
        assert closes[0].error_code == 1
        events = []
        while (ev := self.conn.next_event()) is not None:
            events.append(ev)
        terminated = [e for e in events if isinstance(e, ConnectionTerminated)]
        assert terminated and terminated[0].error_code == 1
        assert terminated[0].reason == closes[0].reason
        return closes[0].reason

    def alive(self) -> bool:
        return not any(isinstance(a, ConnectionCloseQueued) for a in self.conn.transmit())


# ---------------------------------------------------------------- framing


def test_unknown_tag():
    p = Peer()
    p.raw(6, b"\x0d")
    assert "tag 13 is not a frame" in p.close_reason()


def test_truncated_frame_at_fin():
    p = Peer()
    p.raw(6, encode_frame(RouteTo(0)) + encode_frame(msg(0, payload=b"hello"))[:-2])
    assert p.close_reason().startswith("MESSAGE:")


def test_trailing_bytes_after_datagram_message():
    p = Peer()
    data = encode_sequence([RouteTo(0), msg(0)]) + b"\x00"
    p.conn.receive_datagram(data, 0.0)
    assert "bytes after the MESSAGE" in p.close_reason()


def test_version_after_route_to():
    p = Peer()
    p.raw(6, encode_frame(RouteTo(0)) + encode_frame(Version()))
    assert "VERSION after ROUTE_TO" in p.close_reason()


def test_second_route_to():
    p = Peer()
    p.raw(6, encode_frame(RouteTo(0)) + encode_frame(RouteTo(8)))
    assert "second ROUTE_TO" in p.close_reason()


def test_routed_frame_without_route_to():
    p = Peer()
    p.raw(6, encode_frame(msg(0)))
    assert "MESSAGE outside a ROUTE_TO context" in p.close_reason()


def test_varint_over_64_bits():
    # the 9th byte ends a varint; a 10th byte is the next frame (ACK_VERSION after ROUTE_TO)
    p = Peer()
    p.raw(6, b"\x03" + b"\xff" * 9 + b"\x01")
    assert "ACK_VERSION after ROUTE_TO" in p.close_reason()


def test_payload_over_limit():
    p = Peer(config=ProtoConfig(limits=Limits(max_payload_bytes=10)))
    p.send([RouteTo(0), msg(0, payload=b"x" * 11)])
    reason = p.close_reason()
    assert reason.startswith("MESSAGE:") and "limit" in reason


def test_header_data_over_limit():
    p = Peer(config=ProtoConfig(limits=Limits(max_header_bytes=16)))
    p.send([RouteTo(0), MessageFrame(0, (("key", b"v" * 20),), (), b"")])
    reason = p.close_reason()
    assert reason.startswith("MESSAGE:") and "limit" in reason


def test_bidirectional_stream():
    p = Peer()
    p.raw(4, encode_sequence([RouteTo(0), msg(0)]))
    assert "bidirectional" in p.close_reason()


# ---------------------------------------------------------------- handshake


def test_version_mismatch_names_both_versions():
    c = ConnectionMachine(False)
    c.receive_stream_data(2, encode_sequence([Version("9.9.9")]), True, 0.0)
    closes = [a for a in c.transmit() if isinstance(a, ConnectionCloseQueued)]
    assert closes[0].error_code == 1
    assert "9.9.9" in closes[0].reason and "0.0.0-AFTER" in closes[0].reason


def test_sequence_without_version_before_ack_version():
    c = ConnectionMachine(False)
    c.receive_stream_data(2, encode_sequence([ConnectionHeaders(())]), True, 0.0)
    closes = [a for a in c.transmit() if isinstance(a, ConnectionCloseQueued)]
    assert closes and closes[0].error_code == 1
    assert "must start with VERSION" in closes[0].reason


def test_datagram_without_version_before_ack_version():
    c = ConnectionMachine(False)
    c.receive_datagram(encode_sequence([RouteTo(0), msg(0)]), 0.0)
    closes = [a for a in c.transmit() if isinstance(a, ConnectionCloseQueued)]
    assert closes and "must start with VERSION" in closes[0].reason


def test_connection_headers_twice():
    p = Peer()
    p.send([ConnectionHeaders(())])
    assert "CONNECTION_HEADERS: sent twice" in p.close_reason()


def test_bad_window_header():
    c = ConnectionMachine(True)
    c.initiate(0.0)
    bad = ConnectionHeaders((("aqueduct-window", b"-5"),))
    c.receive_stream_data(3, encode_sequence([Version(), AckVersion(), bad]), True, 0.0)
    closes = [a for a in c.transmit() if isinstance(a, ConnectionCloseQueued)]
    assert closes and "CONNECTION_HEADERS: aqueduct-window" in closes[0].reason


# ---------------------------------------------------------------- sides


@pytest.mark.parametrize(
    "frame", [AckReliable((0, 1)), AckNackUnreliable((1,)), CloseReceiver(), Dequeued(5)]
)
def test_receiver_frame_from_the_sender_side(frame):
    # the client holds the sender of the entrypoint: it may not send r->s frames on it
    p = Peer()
    p.send([RouteTo(0), frame])
    assert f"{frame.NAME}: only the receiver side may send it" in p.close_reason()


@pytest.mark.parametrize("frame", [msg(0), SentUnreliable(1), FinishSender(0), CancelSender()])
def test_sender_frame_from_the_receiver_side(frame):
    # the server is the test subject; the scripted client routes s->r frames to a channel
    # where the server holds the sender
    p = Peer()
    chanid = p.conn.new_channel(Side.SERVER)
    p.send([RouteTo(chanid), frame])
    assert f"{frame.NAME}: only the sender side may send it" in p.close_reason()


def test_forget_channel_from_a_non_creator():
    p = Peer()
    chanid = p.conn.new_channel(Side.CLIENT)
    p.send([RouteTo(chanid), ForgetChannel()])
    assert "FORGET_CHANNEL: only the creator may send it" in p.close_reason()


# ---------------------------------------------------------------- attachments


def test_attachment_with_wrong_creator():
    p = Peer()
    wrong = make_chanid(Side.SERVER, Side.CLIENT, False, 0)  # server-created, sent by the client
    p.send([RouteTo(0), msg(0, [AttachmentRef(wrong, ())])])
    reason = p.close_reason()
    assert reason.startswith("MESSAGE: attachment") and "CREATOR" in reason


def test_attachment_of_the_entrypoint():
    p = Peer()
    p.send([RouteTo(0), msg(0, [AttachmentRef(0, ())])])
    assert "MESSAGE: attachment 0 is an existing channel" in p.close_reason()


def test_attachment_of_an_already_attached_channel():
    p = Peer()
    p.send([RouteTo(0), msg(0, [AttachmentRef(CLIENT_SENDS, ())])], end=False)
    assert p.alive()
    p.send([RouteTo(0), msg(1, [AttachmentRef(CLIENT_SENDS, ())])])
    assert f"attachment {CLIENT_SENDS} is an existing channel" in p.close_reason()


def test_attachment_after_early_route_to_is_fine():
    # frames may beat the message that attaches a channel: that is not "existing"
    p = Peer()
    p.send([RouteTo(CLIENT_SENDS), msg(0)])
    p.send([RouteTo(0), msg(0, [AttachmentRef(CLIENT_SENDS, ())])])
    assert p.alive()


# ---------------------------------------------------------------- numbers


def test_duplicate_message_number():
    p = Peer()
    p.send([RouteTo(0), msg(3)])
    p.send([RouteTo(0), msg(3)])
    assert "MESSAGE: duplicate message number 3" in p.close_reason()


def test_duplicate_unreliable_number():
    p = Peer()
    dg = encode_sequence([RouteTo(0), msg(2)])
    p.conn.receive_datagram(dg, 0.0)
    p.conn.receive_datagram(dg, 0.0)
    assert "duplicate unreliable message number 2" in p.close_reason()


def test_message_at_sent_reliable():
    p = Peer()
    p.send([RouteTo(0), FinishSender(2)])
    p.send([RouteTo(0), msg(2)])
    assert "at or past SENT_RELIABLE 2" in p.close_reason()


def test_finish_below_a_received_number():
    p = Peer()
    p.send([RouteTo(0), msg(5)])
    p.send([RouteTo(0), FinishSender(3)])
    assert "FINISH_SENDER: SENT_RELIABLE 3" in p.close_reason()


def test_ack_of_a_number_never_sent():
    p = Peer(is_client=True)
    p.conn.send(0, [b"one"])
    p.send([RouteTo(0), AckReliable((0, 2))])
    assert "ACK_RELIABLE: acks message 1 of channel 0, but only 1" in p.close_reason()


def test_nack_of_a_number_never_sent():
    p = Peer(is_client=True)
    p.conn.set_mode(0, Mode.UNRELIABLE)
    p.conn.send(0, [b"one"])
    p.send([RouteTo(0), AckNackUnreliable((0, 3))])
    assert "ACK_NACK_UNRELIABLE: covers unreliable message 2" in p.close_reason()


def test_dequeued_more_than_outstanding():
    p = Peer(is_client=True)
    p.conn.send(0, [b"one"])
    p.send([RouteTo(0), Dequeued(1000)])
    assert "DEQUEUED: 1000 bytes" in p.close_reason()


# ---------------------------------------------------------------- endings


def test_sent_unreliable_after_finish():
    p = Peer()
    p.send([RouteTo(0), msg(0)])
    p.send([RouteTo(0), FinishSender(2), SentUnreliable(1)])
    assert "SENT_UNRELIABLE: after FINISH_SENDER" in p.close_reason()


def test_second_finish():
    p = Peer()
    p.send([RouteTo(0), FinishSender(1)], end=False)
    p.send([RouteTo(0), FinishSender(1)])
    assert "a second FINISH_SENDER" in p.close_reason()


def test_cancel_after_finish():
    p = Peer()
    p.send([RouteTo(0), FinishSender(1)])
    p.send([RouteTo(0), CancelSender()])
    assert "CANCEL_SENDER: after FINISH_SENDER" in p.close_reason()


def test_second_cancel_after_the_channel_ended():
    p = Peer()
    p.send([RouteTo(0), CancelSender()])
    assert p.alive()
    p.send([RouteTo(0), CancelSender()])
    assert "already got FINISH_SENDER or CANCEL_SENDER" in p.close_reason()


def test_finish_again_after_the_channel_completed():
    p = Peer()
    p.send([RouteTo(0), msg(0), FinishSender(1)])
    assert 0 not in p.conn.channels  # completed and dropped
    p.send([RouteTo(0), FinishSender(1)])
    assert "already got FINISH_SENDER" in p.close_reason()


# ---------------------------------------------------------------- oneshot


ONESHOT = make_chanid(Side.CLIENT, Side.CLIENT, True, 0)


def test_oneshot_second_message_number():
    p = Peer()
    p.send([RouteTo(ONESHOT), msg(1)])
    assert "carries only message number 0" in p.close_reason()


def test_oneshot_finish_over_one():
    p = Peer()
    p.send([RouteTo(ONESHOT), FinishSender(2)])
    assert "sends at most one message" in p.close_reason()


def test_oneshot_duplicate_message():
    p = Peer()
    p.send([RouteTo(ONESHOT), msg(0)], end=False)
    p.send([RouteTo(ONESHOT), msg(0)])
    assert "duplicate message number 0" in p.close_reason()


def test_violation_stops_the_connection():
    p = Peer()
    p.raw(6, b"\x0d")
    p.close_reason()
    p.send([RouteTo(0), msg(0)])
    assert p.conn.transmit() == []
    assert p.conn.next_event() is None
    assert p.conn.get_timer() is None


# ---------------------------------------------------------------- routing (spec section 5)


def sequences(actions) -> dict[int, list]:
    return {
        a.stream_id: StreamSequenceDecoder().feed(a.data)
        for a in actions
        if isinstance(a, StreamDataQueued)
    }


def test_route_to_unknown_remote_channel_creates_it_and_echoes():
    p = Peer()
    p.send([RouteTo(CLIENT_SENDS), msg(0)])
    seqs = sequences(p.conn.transmit())
    assert [RouteTo(CLIENT_SENDS)] in seqs.values()  # our receiver control stream: the echo
    assert CLIENT_SENDS in p.conn.channels


def test_route_to_unknown_local_channel_answers_forget_and_ignores_the_rest():
    p = Peer()
    ours = make_chanid(Side.SERVER, Side.CLIENT, False, 7)  # server-created, never allocated
    p.send([RouteTo(ours), msg(0), msg(0)])  # a duplicate number: ignored, not a violation
    actions = p.conn.transmit()
    assert [RouteTo(ours), ForgetChannel()] in sequences(actions).values()
    assert [a for a in actions if isinstance(a, StreamDataQueued) and a.end_stream]
    assert ours not in p.conn.channels and p.alive()


def test_forget_channel_destroys_state_resets_streams_and_reports_loss():
    p = Peer()
    tx = make_chanid(Side.CLIENT, Side.SERVER, False, 0)  # client-created, the server sends
    p.send([RouteTo(0), msg(0, [AttachmentRef(tx, ())])], end=False)
    p.conn.send(tx, [b"on tx"])
    p.conn.transmit()
    while p.conn.next_event() is not None:
        pass
    p.send([RouteTo(tx), ForgetChannel()])
    actions = p.conn.transmit()
    resets = [a for a in actions if isinstance(a, StreamResetQueued)]
    assert resets and {r.error_code for r in resets} == {2}
    assert p.conn.next_event() == ChannelLost(tx)
    assert tx not in p.conn.channels
    p.send([RouteTo(tx), ForgetChannel()])  # remembered: nothing is re-created
    assert tx not in p.conn.channels and p.alive()


def test_reset_stream_keeps_whole_frames_and_drops_the_partial_one():
    p = Peer()
    data = encode_sequence([RouteTo(0), msg(0, payload=b"whole")]) + encode_frame(msg(1))[:3]
    p.raw(6, data, end=False)
    p.conn.receive_stream_reset(6, 1, 0.0)
    got = [e for e in iter(p.conn.next_event, None) if isinstance(e, MessagesReceived)]
    assert [payload for e in got for payload in e.payloads] == [b"whole"]
    assert p.alive()
