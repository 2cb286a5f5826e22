"""Connector frame codec: golden vectors, round trips, splitter and fuzzing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aqueduct.connector import frames as cf
from aqueduct.connector.batch import MessageBatch
from aqueduct.connector.frames import (
    Ack,
    ConnectorFrameError,
    ConnectorMessage,
    Error,
    FrameSplitter,
    Hello,
    Notify,
    Ok,
    Restart,
    StreamRef,
    decode,
    encode,
)

VECTORS = json.loads(Path("/work/shared/vectors/connector-frames.json").read_text())


def _vector_id(vectors: list[dict]) -> list[str]:
    counts: dict[str, int] = {}
    ids = []
    for v in vectors:
        index = counts.get(v["frame"], 0)
        counts[v["frame"]] = index + 1
        ids.append(f"vector-{v['frame']}-{index}")
    return ids


def _frame_from_fields(kind: str, f: dict) -> cf.Frame:
    """Build the dataclass a vector's ``fields`` describe."""
    if kind == "HELLO":
        return Hello(f["version"], f["cookie"].encode(), f["program_name"], f["instance_name"])
    if kind == "OK":
        return Ok(f["credits"], tuple(StreamRef(*r) for r in f["refs"]))
    if kind == "ERROR":
        return Error(f["reason"])
    if kind == "NOTIFY":
        return Notify(f["stream_id"], f["stream_name"], f["point_of_reference"])
    if kind == "MESSAGE":
        payload = bytes.fromhex(f["payload_hex"]) if "payload_hex" in f else None
        key = f["key"].encode() if "key" in f else None
        return ConnectorMessage(
            f["flags"], f["stream_id"], f.get("message_id"), f.get("event_time"), key, payload
        )
    if kind == "ACK":
        return Ack(f["credits"], tuple(tuple(r) for r in f["refs"]))
    if kind == "RESTART":
        return Restart()
    raise AssertionError(kind)


@pytest.mark.parametrize("vector", VECTORS, ids=_vector_id(VECTORS))
def test_vector(vector: dict) -> None:
    data = bytes.fromhex(vector["hex"])
    if vector["valid"]:
        frame = _frame_from_fields(vector["frame"], vector["fields"])
        assert encode(frame).hex() == vector["hex"]
        assert decode(data) == frame
        assert FrameSplitter().feed(data) == [frame]
    else:
        with pytest.raises(ConnectorFrameError) as info:
            decode(data)
        reason = str(info.value)
        assert reason  # a clear, non-empty ERROR reason
        with pytest.raises(ConnectorFrameError, match=re.escape(reason)):
            FrameSplitter().feed(data)


@pytest.mark.parametrize(
    ("hex_", "reason"),
    [
        ("000000015a", "unknown frame tag 0x5a"),
        ("0000000b4d00030000000000000001", "invalid message flags 0x0003 (EPHEMERAL|BOUNDARY): EPHEMERAL with BOUNDARY"),
        ("000000134d004000000000000000000000000000000000", "invalid message flags 0x0040 (none): reserved bits 0x0040 set"),
        ("000000144d00020000000000000000000000000000000078", "invalid message flags 0x0002 (BOUNDARY): BOUNDARY with a payload"),
        ("000000022100", "RESTART: 1 trailing byte(s) after the body"),
        ("00000000", "zero-length frame: no tag"),
        ("00000003480005", "HELLO: body ends inside version (needs 5 bytes, 0 left)"),
    ],
)
def test_error_reasons_name_the_frame_and_rule(hex_: str, reason: str) -> None:
    with pytest.raises(ConnectorFrameError) as info:
        decode(bytes.fromhex(hex_))
    assert str(info.value) == reason


def test_splitter_refuses_oversized_length_before_the_body_arrives() -> None:
    splitter = FrameSplitter(max_frame_size=100)
    with pytest.raises(ConnectorFrameError) as info:
        splitter.feed((101).to_bytes(4, "big"))
    assert str(info.value) == "frame too large: 101 > 100"
    assert splitter.buffered == 0
    with pytest.raises(ConnectorFrameError):  # dead after an error: nothing else is read
        splitter.feed(encode(Restart()))


def test_splitter_keeps_frames_before_a_bad_one_available() -> None:
    splitter = FrameSplitter()
    splitter.push(encode(Notify(1, "a", 0)) + bytes.fromhex("000000015a"))
    assert splitter.next_frame() == Notify(1, "a", 0)
    with pytest.raises(ConnectorFrameError, match="unknown frame tag 0x5a"):
        splitter.next_frame()


@pytest.mark.parametrize(
    ("message", "rule"),
    [
        (ConnectorMessage(cf.EPHEMERAL, 1, 5, payload=b"x"), "message id is forbidden"),
        (ConnectorMessage(0, 1, None, payload=b"x"), "message id is required"),
        (ConnectorMessage(cf.EVENT_TIME, 1, 0, payload=b""), "event time is required"),
        (ConnectorMessage(0, 1, 0, key=b"k"), "key is forbidden"),
        (ConnectorMessage(cf.BOUNDARY, 1, 0, payload=b""), "payload is forbidden"),
        (ConnectorMessage(cf.BOUNDARY | cf.KEY, 1, 0, key=b"k", payload=None), "BOUNDARY with KEY"),
        (ConnectorMessage(cf.EPHEMERAL | cf.UNSTABLE_REFERENCE, 1, None), "EPHEMERAL with UNSTABLE_REFERENCE"),
        (ConnectorMessage(0, 2**64, 0), r"stream id 18446744073709551616 out of range"),
    ],
)
def test_encoder_refuses_what_the_decoder_would_refuse(message: ConnectorMessage, rule: str) -> None:
    with pytest.raises(ConnectorFrameError, match=rule):
        encode(message)


# ---------------------------------------------------------------- Hypothesis

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
short_text = st.text(max_size=40).filter(lambda s: len(s.encode()) <= 65535)
short_bytes = st.binary(max_size=40)


@st.composite
def messages(draw: st.DrawFn) -> ConnectorMessage:
    flags = draw(st.integers(0, 63))
    if flags & cf.EPHEMERAL:
        flags &= ~(cf.BOUNDARY | cf.UNSTABLE_REFERENCE)
    if flags & cf.BOUNDARY:
        flags &= ~cf.KEY
    return ConnectorMessage(
        flags,
        draw(u64),
        None if flags & cf.EPHEMERAL else draw(u64),
        draw(u64) if flags & cf.EVENT_TIME else None,
        draw(short_bytes) if flags & cf.KEY else None,
        None if flags & cf.BOUNDARY else draw(st.binary(max_size=200)),
    )


frames_st = st.one_of(
    st.builds(Hello, short_text, short_bytes, short_text, short_text),
    st.builds(
        Ok, u32, st.lists(st.builds(StreamRef, u64, short_text, u64), max_size=5).map(tuple)
    ),
    st.builds(Error, short_text),
    st.builds(Notify, u64, short_text, u64),
    messages(),
    st.builds(Ack, u32, st.lists(st.tuples(u64, u64), max_size=5).map(tuple)),
    st.just(Restart()),
)


@settings(deadline=None)
@given(frames_st)
def test_round_trip(frame: cf.Frame) -> None:
    data = encode(frame)
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    assert decode(data) == frame


@settings(deadline=None)
@given(st.lists(frames_st, max_size=8), st.data())
def test_splitter_reassembles_any_chunking(frames: list[cf.Frame], data: st.DataObject) -> None:
    stream = b"".join(encode(f) for f in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    splitter = FrameSplitter()
    out: list[cf.Frame] = []
    last = 0
    for cut in [*cuts, len(stream)]:
        out += splitter.feed(stream[last:cut])
        last = cut
    assert out == frames
    assert splitter.buffered == 0


@settings(deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_only_raise_connector_frame_error(data: bytes) -> None:
    try:
        FrameSplitter(max_frame_size=1024).feed(data)
    except ConnectorFrameError:
        pass


@settings(deadline=None)
@given(frames_st, st.data())
def test_mutated_valid_frames_only_raise_connector_frame_error(
    frame: cf.Frame, data: st.DataObject
) -> None:
    raw = bytearray(encode(frame))
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["flip", "cut", "grow"]))
        if action == "flip" and raw:
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] ^= data.draw(st.integers(1, 255))
        elif action == "cut" and raw:
            del raw[data.draw(st.integers(0, len(raw) - 1)) :]
        else:
            raw += data.draw(st.binary(min_size=1, max_size=4))
    for decoder in (decode, FrameSplitter().feed, FrameSplitter(runs=MessageBatch.run).feed):
        try:
            decoder(bytes(raw))
        except ConnectorFrameError:
            pass


@settings(deadline=None)
@given(messages(), st.data())
def test_splitter_fast_path_agrees_with_decode_on_damaged_messages(
    message: ConnectorMessage, data: st.DataObject
) -> None:
    """The splitter decodes plain MESSAGEs on its own fast path: it must give what decode gives.

    Bytes after the length prefix are flipped, so the input stays one whole
    frame (possibly no longer plain, or no longer valid): same frame, or the
    same ERROR reason.
    """
    raw = bytearray(encode(message))
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(4, len(raw) - 1))
        raw[i] ^= data.draw(st.integers(1, 255))
    for runs in (None, MessageBatch.run):
        try:
            expected = decode(bytes(raw))
        except ConnectorFrameError as exc:
            with pytest.raises(ConnectorFrameError) as info:
                FrameSplitter(runs=runs).feed(bytes(raw))
            assert str(info.value) == str(exc)
        else:
            assert flat(FrameSplitter(runs=runs).feed(bytes(raw))) == [expected]


def flat(frames: list) -> list:
    """Frames with each run spelled out as its records."""
    return [r for f in frames for r in (f if isinstance(f, MessageBatch) else [f])]


@st.composite
def busy_streams(draw: st.DrawFn) -> list[cf.Frame]:
    """What a worker reads: runs of consecutive data records on a few streams, other frames between."""
    out: list[cf.Frame] = []
    next_ids = {1: 0, 2: 0}
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            out.append(draw(frames_st))
            continue
        sid = draw(st.sampled_from([1, 2]))
        start = next_ids[sid] + draw(st.sampled_from([0, 0, 0, 1, -1]))  # mostly continuing
        for m in range(max(0, start), max(0, start) + draw(st.integers(1, 6))):
            timed = draw(st.booleans())
            flags = draw(st.sampled_from([0, 0, 0, cf.EOS, cf.UNSTABLE_REFERENCE])) | (cf.EVENT_TIME if timed else 0)
            out.append(ConnectorMessage(flags, sid, m, m * 10 if timed else None, None, draw(st.binary(max_size=12))))
            next_ids[sid] = m + 1
    return out


@settings(deadline=None)
@given(busy_streams(), st.data())
def test_the_worker_splitter_gives_the_same_records_as_columns(frames: list[cf.Frame], data: st.DataObject) -> None:
    """With runs: consecutive data records of a stream come as one MessageBatch run, nothing else changes."""
    stream = b"".join(encode(f) for f in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    plain, columns = FrameSplitter(), FrameSplitter(runs=MessageBatch.run)
    got_plain: list = []
    got_runs: list = []
    last = 0
    for cut in [*cuts, len(stream)]:
        got_plain += plain.feed(stream[last:cut])
        chunk = columns.feed(stream[last:cut])
        # A run is as long as the chunk allows: the next frame never continues it.
        for a, b in zip(chunk, chunk[1:], strict=False):
            assert not (isinstance(a, MessageBatch) and _continues(a, b))
        got_runs += chunk
        last = cut
    assert got_plain == frames
    assert flat(got_runs) == frames
    for run in got_runs:
        if isinstance(run, MessageBatch):  # only plain data records, ids consecutive
            assert run.is_run and len(run) >= 1 and all(r.flags in (0, cf.EVENT_TIME) for r in run)


def _continues(run: MessageBatch, frame: object) -> bool:
    if isinstance(frame, MessageBatch):
        first, sid = frame.first_id, frame.stream_id
    elif isinstance(frame, ConnectorMessage) and frame.flags in (0, cf.EVENT_TIME):
        first, sid = frame.message_id, frame.stream_id
    else:
        return False
    return (sid, first) == (run.stream_id, run.stop_id)


def test_a_batch_is_a_sequence_of_its_records() -> None:
    run = MessageBatch.run(7, 10, [b"a", b"b", b"c"], [None, 5, None])
    records = [
        ConnectorMessage(0, 7, 10, None, None, b"a"),
        ConnectorMessage(cf.EVENT_TIME, 7, 11, 5, None, b"b"),
        ConnectorMessage(0, 7, 12, None, None, b"c"),
    ]
    assert list(run) == records and len(run) == 3 and run.stop_id == 13
    assert run[1] == records[1] and run[-1] == records[2] and run[1:] == records[1:]
    with pytest.raises(IndexError):
        run[3]
    # Equal to the same records in any sequence form (an event compares the same either way).
    assert run == records and run == tuple(records) and records == run
    assert run != records[:2] and run != MessageBatch.run(7, 11, [b"a", b"b", b"c"], [None, 5, None])
    assert MessageBatch.of(records) == run and MessageBatch.of(run) is run and MessageBatch.of(records).is_run
    run.extend(MessageBatch.run(7, 13, [b"d"], [None]))
    assert run.is_run and run.stop_id == 14 and run[-1] == ConnectorMessage(0, 7, 13, None, None, b"d")
    with pytest.raises(ValueError, match="batch of stream 8 does not continue stream 7"):
        run.extend(MessageBatch.run(8, 14, [b"e"], [None]))
    with pytest.raises(ValueError, match="columns of unequal length"):
        MessageBatch.run(7, 0, [b"a", b"b"], [None])


def test_a_batch_that_is_not_a_run_holds_general_columns() -> None:
    """A gap, a flag or a key: flags, ids and keys per record; a run that meets one becomes general."""
    run = MessageBatch.run(7, 4, [b"a", b"b"], [None, None])
    eos = ConnectorMessage(cf.EOS | cf.KEY, 7, 9, None, b"k", b"z")
    run.extend(MessageBatch.of([eos]))
    assert not run.is_run and run.flags == [0, 0, cf.EOS | cf.KEY] and run.ids == [4, 5, 9]
    assert list(run) == [ConnectorMessage(0, 7, 4, None, None, b"a"), ConnectorMessage(0, 7, 5, None, None, b"b"), eos]
    boundary = ConnectorMessage.build(7, message_id=10, boundary=True)
    run.extend(MessageBatch.of([boundary]))
    assert run[-1] == boundary and run.payload_bytes() == 4  # payloads and the key
    # The rows a session keeps: consecutive rows of a run stay a run; others are general.
    plain = MessageBatch.run(7, 0, [b"a", b"b", b"c", b"d"], [None] * 4)
    assert plain.select([1, 2]).is_run and list(plain.select([1, 2])) == list(plain)[1:3]
    assert not plain.select([0, 2]).is_run and list(plain.select([0, 2])) == [plain[0], plain[2]]
    assert plain.select([0, 1, 2, 3]) is plain
