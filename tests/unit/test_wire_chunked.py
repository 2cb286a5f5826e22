"""The stream decoder gives the same frames however the bytes are split into chunks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aqueduct.wire import (
    AckReliable,
    ConnectionHeaders,
    Dequeued,
    FinishSender,
    FrameError,
    Limits,
    MessageFrame,
    RouteTo,
    StreamSequenceDecoder,
    Version,
    WireError,
    encode_frame,
    encode_sequence,
)

VECTORS = json.loads(
    (Path(__file__).resolve().parents[1] / "vectors" / "aqueduct-frames.json").read_text()
)
VALID_STREAMS = [
    bytes.fromhex(v["hex"]) for v in VECTORS["sequences"] if v["valid"] and v["context"] == "stream"
]

messages = st.builds(
    MessageFrame,
    st.integers(0, 1 << 20),
    st.just((("k", b"v"),)),
    st.just(()),
    st.binary(max_size=300),
)


@st.composite
def streams(draw) -> tuple[list, bytes]:
    """A realistic message stream: prefix, ROUTE_TO, messages, acks, finish."""
    frames = [Version(), ConnectionHeaders((("content-type", b"application/cbor"),)), RouteTo(8)]
    frames += draw(st.lists(st.one_of(messages, st.just(AckReliable((0, 3)))), max_size=12))
    frames += [Dequeued(4096), FinishSender(7)]
    return frames, encode_sequence(frames)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def feed_all(chunks: list[bytes]) -> list:
    decoder = StreamSequenceDecoder()
    frames = []
    for chunk in chunks:
        frames += decoder.feed(chunk)
    decoder.end()
    return frames


@given(streams(), st.lists(st.integers(0, 1 << 16), max_size=40))
def test_any_chunking_decodes_to_the_same_frames(stream: tuple, cuts: list[int]) -> None:
    frames, data = stream
    assert feed_all(chunked(data, cuts)) == frames


@given(st.sampled_from(VALID_STREAMS), st.lists(st.integers(0, 1 << 16), max_size=20))
def test_vectors_decode_the_same_in_chunks(data: bytes, cuts: list[int]) -> None:
    assert feed_all(chunked(data, cuts)) == feed_all([data])


def test_byte_by_byte_big_message() -> None:
    payload = bytes(range(256)) * 400
    frames = [RouteTo(0), MessageFrame(1, (), (), payload), MessageFrame(2, (), (), b"x")]
    data = encode_sequence(frames)
    assert feed_all([data[i : i + 1] for i in range(len(data))]) == frames


@given(streams(), st.data())
def test_partial_frame_at_end_is_an_error(stream: tuple, data: st.DataObject) -> None:
    frames, encoded = stream
    last = len(encode_frame(frames[-1]))  # FINISH_SENDER is last: cut inside it
    cut = data.draw(st.integers(len(encoded) - last + 1, len(encoded) - 1))
    decoder = StreamSequenceDecoder()
    assert decoder.feed(encoded[:cut]) == frames[:-1]
    with pytest.raises(FrameError, match="^FINISH_SENDER: varint ends mid-way"):
        decoder.end()


def test_truncated_message_names_what_is_missing() -> None:
    data = encode_sequence([RouteTo(0), MessageFrame(0, (), (), b"hello")])
    decoder = StreamSequenceDecoder()
    assert decoder.feed(data[:-3]) == [RouteTo(0)]
    with pytest.raises(FrameError, match="^MESSAGE: payload length 5, only 2 bytes present$"):
        decoder.end()


def test_a_failed_decoder_stays_failed() -> None:
    decoder = StreamSequenceDecoder()
    with pytest.raises(WireError, match="outside a ROUTE_TO"):
        decoder.feed(bytes.fromhex("0400000000"))
    with pytest.raises(WireError, match="outside a ROUTE_TO"):
        decoder.feed(b"\x01")
    with pytest.raises(WireError, match="outside a ROUTE_TO"):
        decoder.end()


def test_oversized_payload_is_refused_before_it_arrives() -> None:
    decoder = StreamSequenceDecoder(Limits(max_payload_bytes=1000))
    head = encode_sequence([RouteTo(0), MessageFrame(0, (), (), b"x" * 1001)])[:12]
    with pytest.raises(
        FrameError, match="^MESSAGE: payload length 1001 exceeds the limit of 1000 bytes"
    ):
        decoder.feed(head)
