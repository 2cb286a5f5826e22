"""Hostile input: random and mutated bytes never raise anything but ``WireError``.

A peer controls every byte we decode, so a stray ``IndexError`` or
``UnicodeDecodeError`` would be a crash instead of a clean PROTOCOL_VIOLATION.
Also checks the sans-IO rule: nothing under ``aqueduct/wire`` imports I/O or the clock.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aqueduct.wire
from aqueduct.wire import (
    Limits,
    RangeSet,
    StreamSequenceDecoder,
    WireError,
    decode_ack_nack,
    decode_datagram,
    decode_frame,
    decode_headers,
    decode_varbytes,
    decode_varint,
)

VECTORS = json.loads(
    (Path(__file__).resolve().parents[1] / "vectors" / "aqueduct-frames.json").read_text()
)
SEEDS = [bytes.fromhex(v["hex"]) for v in VECTORS["sequences"] if v["hex"]]
SMALL_LIMITS = Limits(max_header_bytes=64, max_payload_bytes=256)
FUZZ = settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow], deadline=None)


def decode_everywhere(data: bytes) -> None:
    """Push ``data`` through every public decoder; only WireError may come out."""
    for limits in (None, SMALL_LIMITS):
        kwargs = {"limits": limits} if limits else {}
        for step in (len(data) or 1, 3):  # whole, and in 3-byte chunks
            decoder = StreamSequenceDecoder(**kwargs)
            try:
                for i in range(0, len(data), step):
                    decoder.feed(data[i : i + step])
                decoder.end()
            except WireError:
                pass
        try:
            decode_datagram(data, **kwargs)
        except WireError:
            pass
        pos = 0
        try:
            while pos < len(data):  # each iteration consumes at least the tag byte
                _, pos = decode_frame(data, pos, **kwargs)
        except WireError:
            pass
    for decode in (decode_varint, decode_varbytes, decode_headers):
        try:
            decode(data)
        except WireError:
            pass


@st.composite
def mutated(draw) -> bytes:
    """A valid vector with a few bytes flipped, inserted, deleted or cut off."""
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[i] = draw(st.integers(0, 255))
        elif op == "insert":
            data.insert(i, draw(st.integers(0, 255)))
        elif op == "delete" and data:
            del data[i]
        elif op == "truncate":
            del data[i:]
    return bytes(data)


@FUZZ
@given(st.binary(max_size=64))
def test_random_bytes_only_raise_wire_errors(data: bytes) -> None:
    decode_everywhere(data)


@FUZZ
@given(mutated())
def test_mutated_vectors_only_raise_wire_errors(data: bytes) -> None:
    decode_everywhere(data)


@FUZZ
@given(st.lists(st.integers(0, 1 << 64), max_size=8).map(tuple), st.integers(0, 1 << 20))
def test_ack_value_decoders_only_raise_wire_errors(values: tuple, cursor: int) -> None:
    for decode in (RangeSet.from_ack_reliable, decode_ack_nack):
        try:
            decode(cursor, values)
        except WireError:
            pass


WIRE_DIR = Path(aqueduct.wire.__file__).parent
FORBIDDEN = {"asyncio", "aioquic", "socket", "time"}


@pytest.mark.parametrize("path", sorted(WIRE_DIR.glob("*.py")), ids=lambda p: p.name)
def test_wire_modules_do_no_io(path: Path) -> None:
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert not imported & FORBIDDEN, f"{path.name} imports {imported & FORBIDDEN}"
