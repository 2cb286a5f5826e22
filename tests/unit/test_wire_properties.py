"""Hypothesis round trips of the wire codecs, and RangeSet against a plain ``set`` model."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aqueduct.wire import (
    ENTRYPOINT,
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
    FrameError,
    MessageFrame,
    RangeSet,
    RouteTo,
    SentUnreliable,
    Side,
    StreamSequenceDecoder,
    Version,
    WireError,
    chanid_creator,
    chanid_index,
    chanid_oneshot,
    chanid_sender,
    decode_ack_nack,
    decode_datagram,
    decode_frame,
    decode_headers,
    decode_varint,
    encode_ack_nack,
    encode_frame,
    encode_headers,
    encode_sequence,
    encode_varint,
    make_chanid,
    varint_len,
)

U64 = (1 << 64) - 1
u64 = st.one_of(st.integers(0, 300), st.integers(0, U64))
positive = st.one_of(st.integers(1, 300), st.integers(1, U64))
lengths = st.integers(1, 1 << 40)
keys = st.text(st.characters(min_codepoint=0, max_codepoint=127), min_size=1, max_size=8)
headers = st.lists(st.tuples(keys, st.binary(max_size=16)), max_size=4).map(tuple)
attachments = st.lists(st.builds(AttachmentRef, u64, headers), max_size=3).map(tuple)
ack_reliable_ranges = (
    st.integers(1, 4)
    .flatmap(
        lambda pairs: st.tuples(
            st.integers(0, 1 << 40),
            st.lists(lengths, min_size=2 * pairs - 1, max_size=2 * pairs - 1),
        )
    )
    .map(lambda t: (t[0], *t[1]))
)
ack_nack_ranges = st.tuples(st.booleans(), st.lists(lengths, min_size=1, max_size=7)).map(
    lambda t: (0, *t[1]) if t[0] else tuple(t[1])
)

prefix_frames = st.one_of(
    st.just(Version()), st.just(AckVersion()), st.builds(ConnectionHeaders, headers)
)
messages = st.builds(MessageFrame, u64, headers, attachments, st.binary(max_size=64))
routed_frames = st.one_of(
    messages,
    st.builds(SentUnreliable, positive),
    st.builds(FinishSender, u64),
    st.just(CancelSender()),
    st.builds(AckReliable, ack_reliable_ranges),
    st.builds(AckNackUnreliable, ack_nack_ranges),
    st.just(CloseReceiver()),
    st.just(ForgetChannel()),
    st.builds(Dequeued, positive),
)
all_frames = st.one_of(prefix_frames, st.builds(RouteTo, u64), routed_frames)
sequences = st.tuples(
    st.lists(prefix_frames, max_size=3),
    st.none() | st.tuples(st.builds(RouteTo, u64), st.lists(routed_frames, max_size=6)),
).map(lambda t: t[0] + ([t[1][0], *t[1][1]] if t[1] else []))


# ------------------------------------------------------------------ primitives


@given(u64)
def test_varint_round_trips_minimally(n: int) -> None:
    data = encode_varint(n)
    assert len(data) == varint_len(n)
    assert decode_varint(data) == (n, len(data))
    if len(data) > 1:  # minimal: one byte fewer could not hold it
        assert n >= 1 << (7 * (len(data) - 1))


@given(st.integers(0, (1 << 49) - 1), st.integers(1, 7))
def test_non_minimal_varint_is_accepted(n: int, extra: int) -> None:
    minimal = encode_varint(n)
    extra = min(extra, 8 - len(minimal))
    if extra < 1:
        return
    padded = minimal[:-1] + bytes([minimal[-1] | 0x80]) + b"\x80" * (extra - 1) + b"\x00"
    assert decode_varint(padded) == (n, len(padded))


@given(st.one_of(st.integers(max_value=-1), st.integers(min_value=U64 + 1)))
def test_varint_outside_64_bits_is_refused(n: int) -> None:
    with pytest.raises(WireError, match="outside 0..2\\^64-1"):
        encode_varint(n)


@given(headers)
def test_headers_round_trip(h: tuple) -> None:
    data = encode_headers(h)
    assert decode_headers(data) == (h, len(data))


@pytest.mark.parametrize("key", ["", "clé", "日本"])
def test_header_keys_must_be_non_empty_ascii(key: str) -> None:
    with pytest.raises(WireError, match="header key"):
        encode_headers(((key, b"v"),))
    raw = key.encode()
    inner = bytes([len(raw)]) + raw + b"\x01v"
    for _ in range(2):  # header data is memoised, errors never are
        with pytest.raises(WireError, match="header key"):
            decode_headers(bytes([len(inner)]) + inner)
        with pytest.raises(WireError, match="header key"):
            encode_headers(((key, b"v"),))


@given(headers)
def test_repeated_headers_decode_the_same(h: tuple) -> None:
    """Memoised header data: a second encode/decode of the same headers gives the same answer."""
    data = encode_headers(h)
    assert encode_headers(h) == data
    assert decode_headers(data) == decode_headers(b"" + data) == (h, len(data))
    assert decode_headers(b"\x00" + data, 1) == (h, len(data) + 1)


def test_chanid_fields_match_the_vectors() -> None:
    assert make_chanid(Side.SERVER, Side.SERVER, False, 5) == 43
    assert make_chanid(Side.CLIENT, Side.SERVER, True, 20) == 166
    assert ENTRYPOINT == make_chanid(Side.CLIENT, Side.CLIENT, False, 0)


@given(st.sampled_from(Side), st.sampled_from(Side), st.booleans(), st.integers(0, (1 << 61) - 1))
def test_chanid_round_trip(creator: Side, sender: Side, oneshot: bool, index: int) -> None:
    c = make_chanid(creator, sender, oneshot, index)
    assert c <= U64
    assert (chanid_creator(c), chanid_sender(c), chanid_oneshot(c), chanid_index(c)) == (
        creator,
        sender,
        oneshot,
        index,
    )


# ---------------------------------------------------------------------- frames


@given(all_frames, st.binary(max_size=4), st.binary(max_size=4))
def test_every_frame_round_trips(frame, before: bytes, after: bytes) -> None:
    data = encode_frame(frame)
    assert decode_frame(data) == (frame, len(data))
    assert decode_frame(before + data + after, len(before)) == (frame, len(before) + len(data))


@pytest.mark.parametrize(
    "frame, message",
    [
        (SentUnreliable(0), "SENT_UNRELIABLE: COUNT must be > 0"),
        (Dequeued(0), "DEQUEUED: NUM_BYTES must be > 0"),
        (AckReliable(()), "ACK_RELIABLE: needs at least one"),
        (AckReliable((0, 0)), "ACK_RELIABLE: range lengths must be non-zero"),
        (AckReliable((0, 1, 0, 1)), "ACK_RELIABLE: gaps after the first must be non-zero"),
        (AckNackUnreliable(()), "ACK_NACK_UNRELIABLE: needs at least one value"),
        (AckNackUnreliable((1, 0)), "ACK_NACK_UNRELIABLE: only a leading value may be zero"),
        (MessageFrame(U64 + 1, (), (), b""), "MESSAGE: varint"),
        (RouteTo(-1), "ROUTE_TO: varint"),
        (ConnectionHeaders((("", b"x"),)), "CONNECTION_HEADERS: header key"),
    ],
    ids=str,
)
def test_encoder_refuses_what_the_decoder_would_reject(frame, message: str) -> None:
    with pytest.raises(FrameError) as info:
        encode_frame(frame)
    assert str(info.value).startswith(message)


@given(sequences)
def test_sequences_round_trip(frames: list) -> None:
    data = encode_sequence(frames)
    decoder = StreamSequenceDecoder()
    assert decoder.feed(data) == frames
    decoder.end()


@given(st.booleans(), u64, messages)
def test_datagrams_round_trip(with_version: bool, chanid: int, message: MessageFrame) -> None:
    frames = ([Version()] if with_version else []) + [RouteTo(chanid), message]
    assert decode_datagram(encode_sequence(frames)) == frames


@pytest.mark.parametrize(
    "frames, message",
    [
        ([CancelSender()], "sequence: CANCEL_SENDER outside a ROUTE_TO context"),
        ([RouteTo(0), RouteTo(1)], "sequence: a second ROUTE_TO"),
        ([RouteTo(0), ConnectionHeaders(())], "sequence: CONNECTION_HEADERS after ROUTE_TO"),
    ],
    ids=["routed-first", "two-route-to", "prefix-after-route-to"],
)
def test_encode_sequence_enforces_the_grammar(frames: list, message: str) -> None:
    with pytest.raises(FrameError) as info:
        encode_sequence(frames)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    "frames, message",
    [
        ([RouteTo(0)], "datagram: ends before MESSAGE"),
        ([Version(), MessageFrame(0, (), (), b"")], "datagram: expected ROUTE_TO, got MESSAGE"),
        ([RouteTo(0), SentUnreliable(1)], "datagram: expected MESSAGE, got SENT_UNRELIABLE"),
        (
            [RouteTo(0), MessageFrame(0, (), (), b""), CancelSender()],
            "datagram: 1 bytes after the MESSAGE",
        ),
    ],
    ids=["no-message", "no-route-to", "not-a-message", "trailing-frame"],
)
def test_datagram_grammar_is_enforced(frames: list, message: str) -> None:
    data = b"".join(encode_frame(f) for f in frames)
    with pytest.raises(FrameError) as info:
        decode_datagram(data)
    assert str(info.value).startswith(message)


# -------------------------------------------------------------------- RangeSet

small = st.integers(0, 120)
range_ops = st.lists(
    st.one_of(small.map(lambda n: (n, n + 1)), st.tuples(small, small).map(sorted).map(tuple)),
    max_size=40,
)


def runs(model: set[int]) -> list[tuple[int, int]]:
    """Maximal runs of consecutive ints in ``model``, as half-open ranges."""
    out: list[tuple[int, int]] = []
    for n in sorted(model):
        if out and out[-1][1] == n:
            out[-1] = (out[-1][0], n + 1)
        else:
            out.append((n, n + 1))
    return out


def build(ops: list[tuple[int, int]]) -> tuple[RangeSet, set[int]]:
    rs, model = RangeSet(), set()
    for start, stop in ops:
        if stop == start + 1:
            rs.add(start)
        else:
            rs.add_range(start, stop)
        model.update(range(start, stop))
    return rs, model


@given(range_ops)
def test_rangeset_matches_a_set(ops: list) -> None:
    rs, model = build(ops)
    assert list(rs) == runs(model)
    assert len(rs) == len(runs(model))
    assert rs.count() == len(model)
    assert all((n in rs) == (n in model) for n in range(130))
    base = 0
    while base in model:
        base += 1
    assert rs.base == base
    assert rs.above_base() == [r for r in runs(model) if r[0] > base]


@given(range_ops, st.lists(small, max_size=40))
def test_rangeset_insert_reports_duplicates(ops: list, numbers: list) -> None:
    """``insert`` is ``add`` that says whether the int was new (a receiver's duplicate check)."""
    rs, model = build(ops)
    for n in numbers:
        assert rs.insert(n) == (n not in model)
        model.add(n)
    assert list(rs) == runs(model)
    assert rs.count() == len(model)


@given(range_ops, small, small)
def test_rangeset_gaps_and_min_missing(ops: list, a: int, b: int) -> None:
    rs, model = build(ops)
    start, stop = min(a, b), max(a, b)
    assert rs.gaps(start, stop) == runs(set(range(start, stop)) - model)
    expected = a
    while expected in model:
        expected += 1
    assert rs.min_missing_from(a) == expected


@given(range_ops, small)
def test_ack_reliable_round_trips_from_since(ops: list, since: int) -> None:
    rs, model = build(ops)
    values = rs.to_ack_reliable(since)
    above = {n for n in model if n >= since}
    if not above:
        assert values == ()
        return
    assert decode_frame(encode_frame(AckReliable(values)))[0] == AckReliable(values)
    assert list(RangeSet.from_ack_reliable(since, values)) == runs(above)


@given(range_ops, small, small)
def test_ack_nack_covers_cursor_to_end(ops: list, a: int, b: int) -> None:
    rs, model = build(ops)
    cursor, end = min(a, b), max(a, b)
    values = encode_ack_nack(cursor, rs, end)
    if cursor == end:
        assert values == ()
        return
    assert decode_frame(encode_frame(AckNackUnreliable(values)))[0] == AckNackUnreliable(values)
    acked, nacked, new_cursor = decode_ack_nack(cursor, values)
    assert new_cursor == end
    assert {n for r in acked for n in r} == {n for n in range(cursor, end) if n in model}
    assert {n for r in nacked for n in r} == {n for n in range(cursor, end) if n not in model}


def test_rangeset_worked_example() -> None:
    """The example of docs/wire.md."""
    rs = RangeSet()
    for n in (0, 1, 2, 3, 5, 6, 9):
        rs.add(n)
    assert list(rs) == [(0, 4), (5, 7), (9, 10)]
    assert (rs.base, rs.above_base()) == (4, [(5, 7), (9, 10)])
    assert rs.to_ack_reliable(2) == (0, 2, 1, 2, 2, 1)
    assert encode_ack_nack(2, rs, 8) == (2, 1, 2, 1)
