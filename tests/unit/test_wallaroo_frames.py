"""Wallaroo v3 frame codec: golden vectors byte for byte, round trips, splitting, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aqueduct.connector.wallaroo.frames import (
    NO_POINT,
    EndOfStream,
    Frame,
    NotifyAck,
    WallarooAck,
    WallarooError,
    WallarooFrameError,
    WallarooFrameSplitter,
    WallarooHello,
    WallarooMessage,
    WallarooNotify,
    WallarooOk,
    WallarooRestart,
    decode,
    encode,
)

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "vectors" / "wallaroo-frames.json").read_text())
VALID = [v for v in VECTORS if v["valid"]]
INVALID = [v for v in VECTORS if not v["valid"]]


def _frame(kind: str, f: dict) -> Frame:
    """The dataclass a vector's ``fields`` describe."""
    builders = {
        "HELLO": lambda: WallarooHello(f["version"], f["cookie"].encode(), f["program_name"], f["instance_name"]),
        "OK": lambda: WallarooOk(f["credits"]),
        "ERROR": lambda: WallarooError(f["reason"]),
        "NOTIFY": lambda: WallarooNotify(f["stream_id"], f["stream_name"], f["point_of_reference"]),
        "NOTIFY_ACK": lambda: NotifyAck(f["success"], f["stream_id"], f["point_of_reference"]),
        "MESSAGE": lambda: WallarooMessage(
            f["stream_id"], f["message_id"], f["event_time"], f["key"].encode(), bytes.fromhex(f["payload_hex"])
        ),
        "ACK": lambda: WallarooAck(f["credits"], tuple(tuple(r) for r in f["refs"])),
        "RESTART": lambda: WallarooRestart(f["address"]),
        "EOS_MESSAGE": lambda: EndOfStream(f["stream_id"]),
    }
    return builders[kind]()


@pytest.mark.parametrize("vector", VALID, ids=lambda v: f"{v['frame']}-{v['hex'][:24]}")
def test_valid_vector_byte_for_byte(vector: dict) -> None:
    frame = _frame(vector["frame"], vector["fields"])
    data = bytes.fromhex(vector["hex"])
    assert encode(frame) == data
    assert decode(data) == frame
    assert WallarooFrameSplitter().feed(data) == [frame]


@pytest.mark.parametrize("vector", INVALID, ids=lambda v: v["why"])
def test_invalid_vector_has_the_exact_error(vector: dict) -> None:
    data = bytes.fromhex(vector["hex"])
    with pytest.raises(WallarooFrameError) as info:
        WallarooFrameSplitter().feed(data)
    assert str(info.value) == vector["error"]
    if len(data) >= 5 and int.from_bytes(data[:4], "big") == len(data) - 4:
        with pytest.raises(WallarooFrameError) as whole:
            decode(data)
        assert str(whole.value) == vector["error"]


def test_every_tag_from_201_to_206_is_refused_as_two_phase_commit() -> None:
    for tag in range(201, 207):
        with pytest.raises(WallarooFrameError, match=f"^frame tag {tag} is a two-phase-commit frame"):
            decode(bytes([0, 0, 0, 1, tag]))
    with pytest.raises(WallarooFrameError, match="^unknown frame tag 207$"):
        decode(bytes([0, 0, 0, 1, 207]))


def test_an_oversized_frame_is_refused_from_its_length_prefix_alone() -> None:
    splitter = WallarooFrameSplitter(max_frame_size=64)
    splitter.push(encode(WallarooOk(1)) + (65).to_bytes(4, "big"))
    frames, error = splitter.drain()
    assert frames == [WallarooOk(1)]  # the good frame before it still counts
    assert str(error) == "frame too large: 65 > 64"
    assert splitter.buffered == 0  # nothing of the big frame is held
    splitter.push(b"more")
    assert splitter.drain() == ([], error)  # dead from here on


def test_encoding_refuses_values_the_wire_cannot_carry() -> None:
    with pytest.raises(WallarooFrameError, match=r"^MESSAGE: event time 9223372036854775808 out of range"):
        encode(WallarooMessage(1, 1, 2**63))
    with pytest.raises(WallarooFrameError, match=r"^NOTIFY: stream id -1 out of range 0\.\."):
        encode(WallarooNotify(-1, "s", 0))
    with pytest.raises(WallarooFrameError, match=r"^HELLO: cookie is 65536 bytes, more than 65535$"):
        encode(WallarooHello("0.0.1", b"x" * 65536, "p", "i"))


u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, NO_POINT)
text = st.text(max_size=20)
short = st.binary(max_size=20)
frames = st.one_of(
    st.builds(WallarooHello, text, short, text, text),
    st.builds(WallarooOk, u32),
    st.builds(WallarooError, text),
    st.builds(WallarooNotify, u64, text, u64),
    st.builds(NotifyAck, st.booleans(), u64, u64),
    st.builds(WallarooMessage, u64, u64, st.integers(-(2**63), 2**63 - 1), short, st.binary(max_size=40)),
    st.builds(WallarooAck, u32, st.lists(st.tuples(u64, u64), max_size=4).map(tuple)),
    st.builds(WallarooRestart, text),
    st.builds(EndOfStream, u64),
)


@given(frames)
def test_round_trip(frame: Frame) -> None:
    assert decode(encode(frame)) == frame


@given(st.lists(frames, max_size=8), st.lists(st.integers(0, 400), max_size=6))
def test_splitting_at_any_byte_gives_the_same_frames(sent: list[Frame], cuts: list[int]) -> None:
    data = b"".join(encode(f) for f in sent)
    splitter = WallarooFrameSplitter()
    got: list[Frame] = []
    start = 0
    for cut in sorted(c for c in cuts if c <= len(data)) + [len(data)]:
        got += splitter.feed(data[start:cut])
        start = cut
    assert got == sent and splitter.buffered == 0


@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_give_a_reason(data: bytes) -> None:
    splitter = WallarooFrameSplitter(max_frame_size=1024)
    splitter.push(data)
    frames, error = splitter.drain()
    for frame in frames:
        assert decode(encode(frame)) == frame
    assert error is None or str(error)
