"""Stateless reset tokens and packets (RFC 9000 section 10.3): what a restarted server sends, what a client checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aqueduct.runtime.backends.stateless_reset import (
    MIN_RESET,
    RESET_SIZE,
    TOKEN_SIZE,
    ResetTokens,
    token_of,
)
from aqueduct.runtime.certs import generate_certs

TOKENS = ResetTokens(b"k" * 32)


def test_the_same_key_file_gives_the_same_tokens_after_a_restart(tmp_path: Path) -> None:
    certs = generate_certs(tmp_path / "a")
    first, again = ResetTokens.from_key_file(certs.server_key), ResetTokens.from_key_file(certs.server_key)
    assert first.token(b"12345678") == again.token(b"12345678")
    other = ResetTokens.from_key_file(generate_certs(tmp_path / "b").server_key)
    assert other.token(b"12345678") != first.token(b"12345678")  # a new key: old clients are not reset


def test_each_connection_id_has_its_own_token() -> None:
    assert TOKENS.token(b"12345678") != TOKENS.token(b"12345679")
    assert len(TOKENS.token(b"12345678")) == TOKEN_SIZE


@given(st.binary(min_size=1, max_size=1500))
def test_a_reset_is_shorter_than_what_it_answers_and_carries_the_token(packet: bytes) -> None:
    reset = TOKENS.reset_for(packet, b"12345678")
    if len(packet) <= MIN_RESET:
        assert reset is None  # too short to answer with something shorter
        return
    assert reset is not None
    assert MIN_RESET <= len(reset) < len(packet) and len(reset) <= RESET_SIZE
    assert token_of(reset) == TOKENS.token(b"12345678")  # a short header, ending in the token


def test_a_long_header_packet_is_never_taken_for_a_reset() -> None:
    assert token_of(bytes([0xC0]) + bytes(60)) is None
    assert token_of(bytes([0x40]) + bytes(MIN_RESET - 2)) is None  # too short


def test_a_secret_too_short_is_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        ResetTokens(b"short")
