"""``LOG/acked.json`` and its copy, on real files: a spoiled copy falls back to the other, never backwards.

The bridge answers a restarted connector from these offsets; a copy
going backwards would tell it a lower point than it was told before the
crash. Each test spoils the files the way a crash, a torn write or a
flipped bit would, then reads them as a restarted bridge does.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from aqueduct.bridge.storage.acked import (
    ACKED_COPY,
    ACKED_FILE,
    read_acked,
    read_acked_at,
    restore_acked,
    write_acked,
)

EARLIER, LATER = {5: 8, 6: 2}, {5: 12, 6: 2, 7: 1}


def crash_between_the_copies(log_dir: Path) -> None:
    """``EARLIER`` written (and acked); ``LATER`` reached the first copy only, then the bridge died."""
    write_acked(log_dir, EARLIER)
    earlier_copy = (log_dir / ACKED_COPY).read_bytes()
    write_acked(log_dir, LATER)
    (log_dir / ACKED_COPY).write_bytes(earlier_copy)


def test_both_copies_hold_every_write_and_read_back_as_written(tmp_path: Path) -> None:
    assert read_acked_at(tmp_path) == ({}, None)  # before the first commit
    write_acked(tmp_path, EARLIER, acked_at=100.0)
    write_acked(tmp_path, LATER, acked_at=200.0)
    assert (tmp_path / ACKED_FILE).read_bytes() == (tmp_path / ACKED_COPY).read_bytes()
    assert read_acked_at(tmp_path) == (LATER, 200.0)


@pytest.mark.parametrize("spoiled", [ACKED_FILE, ACKED_COPY])
def test_a_flipped_bit_anywhere_in_one_copy_reads_the_same_offsets(tmp_path: Path, spoiled: str) -> None:
    write_acked(tmp_path, EARLIER)
    write_acked(tmp_path, LATER)
    file = tmp_path / spoiled
    original = file.read_bytes()
    for at in range(len(original)):
        for bit in (0, 3, 7):
            flipped = bytearray(original)
            flipped[at] ^= 1 << bit
            file.write_bytes(bytes(flipped))
            assert read_acked(tmp_path) == LATER, (at, bit, bytes(flipped))


@pytest.mark.parametrize("keep", [0, 1, 17, -1])
def test_a_torn_newer_copy_falls_back_to_the_last_good_one(tmp_path: Path, keep: int) -> None:
    """The first copy cut short (its first ``keep`` bytes kept) while the second still holds the earlier write."""
    crash_between_the_copies(tmp_path)
    file = tmp_path / ACKED_FILE
    file.write_bytes(file.read_bytes()[:keep])
    assert read_acked(tmp_path) == EARLIER  # what the last ACK sent said: never below it


def test_after_a_crash_between_the_copies_the_newer_offsets_are_read(tmp_path: Path) -> None:
    """Spark committed ``LATER`` before the crash: acking it after the restart is no step back."""
    crash_between_the_copies(tmp_path)
    assert read_acked(tmp_path) == LATER


def test_a_restarted_bridge_makes_both_copies_whole_before_acking_from_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Else a flipped bit in the one copy holding the offsets it acked would take them back."""
    crash_between_the_copies(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert restore_acked(tmp_path) == LATER
    assert "restored both copies" in caplog.text
    assert (tmp_path / ACKED_FILE).read_bytes() == (tmp_path / ACKED_COPY).read_bytes()
    (tmp_path / ACKED_FILE).write_bytes(b"{")
    assert read_acked(tmp_path) == LATER


def test_a_log_from_before_the_copy_is_read_and_given_one(tmp_path: Path) -> None:
    write_acked(tmp_path, EARLIER)
    (tmp_path / ACKED_COPY).unlink()
    assert read_acked(tmp_path) == EARLIER
    assert restore_acked(tmp_path) == EARLIER
    assert (tmp_path / ACKED_COPY).read_bytes() == (tmp_path / ACKED_FILE).read_bytes()


def test_whole_copies_are_not_rewritten(tmp_path: Path) -> None:
    write_acked(tmp_path, EARLIER, acked_at=100.0)
    before = [(tmp_path / name).stat().st_mtime_ns for name in (ACKED_FILE, ACKED_COPY)]
    assert restore_acked(tmp_path) == EARLIER
    assert [(tmp_path / name).stat().st_mtime_ns for name in (ACKED_FILE, ACKED_COPY)] == before


def test_with_both_copies_spoiled_the_offsets_are_lost_and_said_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The documented fallback: acks restart from the commit files (a micro-batch behind at most)."""
    write_acked(tmp_path, EARLIER)
    first = tmp_path / ACKED_FILE
    first.write_text(first.read_text().replace('"5": 8', '"5": 9'))  # still JSON: only the CRC tells
    (tmp_path / ACKED_COPY).write_bytes(b"")  # torn to nothing
    with caplog.at_level(logging.ERROR):
        assert read_acked_at(tmp_path) == ({}, None)  # never offsets nobody committed
        assert restore_acked(tmp_path) == {}
    assert f"{first} is corrupt (its offsets fail their CRC32C check" in caplog.text
    assert f"{tmp_path / ACKED_COPY} is corrupt" in caplog.text
    assert f"no good copy of {first} is left: acks restart from the commit files" in caplog.text
    assert (tmp_path / ACKED_COPY).read_bytes() == b""  # nothing good to restore from: left for an operator
