"""Every golden vector of aqueduct-frames.json, one test case each (``pytest -k vector``).

Valid sequences must encode to exactly the vector's bytes and decode to
exactly its frames; invalid ones must be refused with a ``WireError`` whose
message names the frame (or ``sequence``) and the rule.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

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
    MessageFrame,
    RouteTo,
    SentUnreliable,
    StreamSequenceDecoder,
    Version,
    WireError,
    decode_datagram,
    decode_varint,
    encode_sequence,
    encode_varint,
    varint_len,
)

VECTORS = json.loads(
    (Path(__file__).resolve().parents[1] / "vectors" / "aqueduct-frames.json").read_text()
)

# What each invalid vector's error must say: "<FRAME or sequence>: <rule>".
EXPECTED_ERRORS = {
    "unknown tag": "UNKNOWN: tag 13 is not a frame",
    "routed frame without ROUTE_TO": "sequence: MESSAGE outside a ROUTE_TO context",
    "second ROUTE_TO": "sequence: a second ROUTE_TO",
    "VERSION after ROUTE_TO": "sequence: VERSION after ROUTE_TO",
    "wrong version string": "VERSION: version mismatch: peer speaks 9.9.9, we speak 0.0.0-AFTER",
    "bad magic": "VERSION: magic bytes differ",
    "truncated varint": "MESSAGE: varint ends mid-way",
    "truncated payload": "MESSAGE: payload length 5, only 2 bytes present",
    "odd header items": "CONNECTION_HEADERS: header data must hold key/value pairs",
    "ack ranges empty": "ACK_RELIABLE: needs at least one (gap, ack-length) pair",
    "ack ranges odd": "ACK_RELIABLE: values must come in (gap, ack-length) pairs",
    "ack zero length": "ACK_RELIABLE: range lengths must be non-zero",
    "ack_nack zero inside": "ACK_NACK_UNRELIABLE: only a leading value may be zero",
    "prefix frame after a 9-byte varint": "sequence: ACK_VERSION after ROUTE_TO",
    "sent_unreliable zero": "SENT_UNRELIABLE: COUNT must be > 0",
    "dequeued zero": "DEQUEUED: NUM_BYTES must be > 0",
}


def _id(name: str) -> str:
    return "vector-" + re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")


def _headers(pairs: list[list[str]]) -> tuple[tuple[str, bytes], ...]:
    return tuple((k, v.encode()) for k, v in pairs)


def to_frame(d: dict):
    """Convert a JSON frame of the vectors file to our dataclass."""
    simple = {
        "ACK_VERSION": AckVersion,
        "CANCEL_SENDER": CancelSender,
        "CLOSE_RECEIVER": CloseReceiver,
        "FORGET_CHANNEL": ForgetChannel,
    }
    t = d["type"]
    if t in simple:
        return simple[t]()
    if t == "VERSION":
        return Version(d["version"])
    if t == "CONNECTION_HEADERS":
        return ConnectionHeaders(_headers(d["headers"]))
    if t == "ROUTE_TO":
        return RouteTo(d["chanid"])
    if t == "MESSAGE":
        atts = tuple(AttachmentRef(a["chanid"], _headers(a["headers"])) for a in d["attachments"])
        return MessageFrame(d["num"], _headers(d["headers"]), atts, bytes.fromhex(d["payload_hex"]))
    if t == "SENT_UNRELIABLE":
        return SentUnreliable(d["count"])
    if t == "FINISH_SENDER":
        return FinishSender(d["sent_reliable"])
    if t == "ACK_RELIABLE":
        return AckReliable(tuple(d["ranges"]))
    if t == "ACK_NACK_UNRELIABLE":
        return AckNackUnreliable(tuple(d["ranges"]))
    if t == "DEQUEUED":
        return Dequeued(d["num_bytes"])
    raise AssertionError(f"vector frame type {t} has no dataclass")


def decode(context: str, data: bytes) -> list:
    if context == "datagram":
        return decode_datagram(data)
    decoder = StreamSequenceDecoder()
    frames = decoder.feed(data)
    decoder.end()
    return frames


SEQUENCES = VECTORS["sequences"]
VALID = [v for v in SEQUENCES if v["valid"]]
INVALID = [v for v in SEQUENCES if not v["valid"]]


@pytest.mark.parametrize(
    "vec", VECTORS["varints"], ids=[_id("varint-" + v["value"]) for v in VECTORS["varints"]]
)
def test_varint_vector(vec: dict) -> None:
    value, data = int(vec["value"]), bytes.fromhex(vec["hex"])
    assert encode_varint(value) == data
    assert varint_len(value) == len(data)
    assert decode_varint(data) == (value, len(data))


@pytest.mark.parametrize(
    "vec",
    VECTORS["varints_non_minimal_accepted"],
    ids=[_id("non-minimal-" + v["hex"]) for v in VECTORS["varints_non_minimal_accepted"]],
)
def test_non_minimal_varint_vector_is_accepted(vec: dict) -> None:
    data = bytes.fromhex(vec["hex"])
    assert decode_varint(data) == (int(vec["value"]), len(data))
    assert len(encode_varint(int(vec["value"]))) < len(data)  # we re-encode minimally


@pytest.mark.parametrize("vec", VALID, ids=[_id(v["name"]) for v in VALID])
def test_valid_sequence_vector(vec: dict) -> None:
    data = bytes.fromhex(vec["hex"])
    frames = [to_frame(f) for f in vec["frames"]]
    assert encode_sequence(frames) == data
    assert decode(vec["context"], data) == frames


@pytest.mark.parametrize("vec", INVALID, ids=[_id(v["name"]) for v in INVALID])
def test_invalid_sequence_vector(vec: dict) -> None:
    with pytest.raises(WireError) as info:
        decode(vec["context"], bytes.fromhex(vec["hex"]))
    message = str(info.value)
    expected = EXPECTED_ERRORS.get(vec["name"])
    if expected is None:  # a vector added upstream: at least the message format must hold
        assert re.match(r"^(sequence|[A-Z_]+): \S", message), message
    else:
        assert message.startswith(expected), message
