"""The repository carries its own copy of the golden vectors and specs.

The copies make a clone self-contained; this test keeps them identical to the
upstream ``../shared`` files wherever those are present (CI has them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"

PAIRS = [
    ("tests/vectors/aqueduct-frames.json", "vectors/aqueduct-frames.json"),
    ("tests/vectors/connector-frames.json", "vectors/connector-frames.json"),
    ("docs/spec/aqueduct-wire.md", "spec/aqueduct-wire.md"),
    ("docs/spec/connector-wire.md", "spec/connector-wire.md"),
    ("docs/spec/wallaroo-compat.md", "spec/wallaroo-compat.md"),
]


@pytest.mark.parametrize("ours, upstream", PAIRS, ids=[p[0] for p in PAIRS])
def test_copy_matches_upstream(ours: str, upstream: str) -> None:
    source = SHARED / upstream
    if not source.exists():
        pytest.skip("no ../shared beside this clone")
    assert (ROOT / ours).read_bytes() == source.read_bytes()
