"""The message payload codec: CBOR values, raw bytes, handles as tag-16721 attachments."""

from __future__ import annotations

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aqueduct.proto.errors import LocalProtocolError
from aqueduct.runtime.handles.headers import normalize_headers
from aqueduct.runtime.handles.payload import (
    ATTACHMENT_TAG,
    CBOR,
    OCTET_STREAM,
    PayloadError,
    decode_value,
    encode_value,
    plain_decoder,
)


class Handle:
    """Stands for a Sender/Receiver: the codec only sees an unencodable object."""


def collecting_attach(found: list[object]):
    def attach(obj: object) -> int:
        if not isinstance(obj, Handle):
            raise TypeError(f"{type(obj).__name__} is not a channel handle")
        for i, seen in enumerate(found):  # the runtime attaches a handle once per message
            if seen is obj:
                return i
        found.append(obj)
        return len(found) - 1

    return attach


cbor_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda children: st.lists(children | st.binary(), max_size=5)
    | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=20,
)


@given(cbor_values.filter(lambda v: not isinstance(v, bytes)))
def test_cbor_values_round_trip(value):
    payload, headers = encode_value(value, collecting_attach([]))
    assert headers == ()  # CBOR is the connection default: no per-message header
    assert decode_value(payload, headers, []) == value


@given(st.binary(max_size=70_000))
def test_raw_bytes_are_a_cbor_byte_string_around_the_unchanged_bytes(data):
    payload, headers = encode_value(data, collecting_attach([]))
    assert headers == ()  # no 39-byte per-message header under the CBOR default
    assert payload.endswith(data) and len(payload) - len(data) <= 5
    assert cbor2.loads(payload) == data  # any CBOR decoder reads it
    assert decode_value(payload, headers, []) == data


@pytest.mark.parametrize("n", [0, 23, 24, 255, 256, 65_535, 65_536])
def test_byte_string_heads_at_every_length_boundary(n):
    data = bytes(range(256)) * (n // 256) + bytes(n % 256)
    payload, _ = encode_value(data, collecting_attach([]))
    assert payload == cbor2.dumps(data)  # the same (shortest) head cbor2 writes
    assert decode_value(payload, (), []) == data


def test_bytearray_and_memoryview_are_raw_too():
    for value in (bytearray(b"abc"), memoryview(b"abc")):
        payload, headers = encode_value(value, collecting_attach([]))
        assert (payload, headers) == (b"Cabc", ())
        assert decode_value(payload, headers, []) == b"abc"


def test_raw_bytes_under_another_default_carry_the_octet_stream_header():
    payload, headers = encode_value(b"abc", collecting_attach([]), default_content_type=b"text/plain")
    assert payload == b"abc" and dict(headers)["content-type"] == OCTET_STREAM


def test_a_truncated_byte_string_is_a_payload_error():
    with pytest.raises(PayloadError, match="not valid CBOR"):
        decode_value(b"\x59\x01", (), [])


@given(st.one_of(st.binary(max_size=600), cbor_values))
def test_the_plain_message_decoder_reads_what_the_general_one_reads(value):
    payload, headers = encode_value(value, collecting_attach([]))
    decode = plain_decoder(CBOR)
    assert decode is not None and decode(payload) == decode_value(payload, headers, []) == value


@pytest.mark.parametrize("payload", [b"\x58\x05abc", b"\x58\x02abc", b"\x58"])
def test_the_plain_decoder_rejects_a_byte_string_of_the_wrong_length(payload):
    decode = plain_decoder(CBOR)
    assert decode is not None
    with pytest.raises(PayloadError, match="not valid CBOR"):
        decode(payload)


@given(st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=10))
def test_handles_anywhere_become_indexed_attachments(positions):
    handles = [Handle() for _ in range(5)]
    value = {"nested": [[handles[i], i] for i in positions], "first": handles[positions[0]]}
    found: list[object] = []
    payload, headers = encode_value(value, collecting_attach(found))
    # In the CBOR each handle is tag 16721 holding its index in `found`.
    raw = cbor2.loads(payload)
    assert raw["first"] == cbor2.CBORTag(ATTACHMENT_TAG, found.index(handles[positions[0]]))
    assert len(found) == len(set(positions))
    decoded = decode_value(payload, headers, found)
    assert decoded["first"] is handles[positions[0]]
    assert [pair[0] for pair in decoded["nested"]] == [handles[i] for i in positions]


def test_unencodable_value_names_the_type():
    with pytest.raises(TypeError, match="object is not a channel handle"):
        encode_value({"x": object()}, collecting_attach([]))


def test_bad_attachment_index_is_a_clear_payload_error():
    payload = cbor2.dumps([cbor2.CBORTag(ATTACHMENT_TAG, 3)])
    with pytest.raises(PayloadError, match="attachment index below 1, got 3"):
        decode_value(payload, (), [Handle()])


@given(cbor_values, st.binary(min_size=1, max_size=8))
def test_bytes_after_the_cbor_value_are_a_payload_error(value, extra):
    payload, headers = encode_value(value, collecting_attach([]))
    with pytest.raises(PayloadError, match="not valid CBOR"):
        decode_value(payload + extra, headers, [])


def test_the_error_names_the_bytes_after_the_value():
    with pytest.raises(PayloadError, match=r"not valid CBOR \(1 byte after the value\)"):
        decode_value(b"\x58\x02abc", (), [])


def test_invalid_cbor_is_a_payload_error():
    with pytest.raises(PayloadError, match="not valid CBOR"):
        decode_value(b"\xff", (), [])


def test_other_content_types_arrive_as_raw_bytes():
    body = b'{"json": true}'
    assert decode_value(body, (("content-type", b"application/json"),), []) == body


def test_connection_default_content_type_applies_without_header():
    assert decode_value(b"\x01\x02", (), [], default_content_type=OCTET_STREAM) == b"\x01\x02"
    assert decode_value(cbor2.dumps(7), (), [], default_content_type=CBOR) == 7


@given(st.one_of(st.binary(), cbor_values))
def test_a_side_announcing_octet_stream_default_round_trips_both_kinds(value):
    payload, headers = encode_value(value, collecting_attach([]), default_content_type=OCTET_STREAM)
    if isinstance(value, bytes):
        assert headers == () and payload == value  # the default needs no per-message header
    else:
        assert headers == (("content-type", CBOR),)
    assert decode_value(payload, headers, [], default_content_type=OCTET_STREAM) == value


def test_headers_accept_dicts_and_pairs_and_reject_bad_keys():
    assert normalize_headers({"a": "x", "b": b"y"}) == (("a", b"x"), ("b", b"y"))
    assert normalize_headers([("k", "1"), ("k", "2")]) == (("k", b"1"), ("k", b"2"))  # a multimap
    for bad in ({"": "x"}, {"ключ": "x"}):
        with pytest.raises(LocalProtocolError, match="non-empty ASCII"):
            normalize_headers(bad)
    with pytest.raises(LocalProtocolError, match="must be str or bytes"):
        normalize_headers({"n": 1})
