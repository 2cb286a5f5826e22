"""The repository carries its own copy of the golden vectors and specs.

The copies make a clone self-contained; this test keeps them identical to
the upstream files. Upstream is ``$AQUEDUCT_SHARED`` if set, else the
``../shared`` directory beside the clone (the workspace and CI have it).
Where upstream is expected (either is there), a missing or different file
fails; only a lone clone without either skips, saying so.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PAIRS = [
    ("tests/vectors/aqueduct-frames.json", "vectors/aqueduct-frames.json"),
    ("tests/vectors/connector-frames.json", "vectors/connector-frames.json"),
    ("docs/spec/aqueduct-wire.md", "spec/aqueduct-wire.md"),
    ("docs/spec/connector-wire.md", "spec/connector-wire.md"),
    ("docs/spec/wallaroo-compat.md", "spec/wallaroo-compat.md"),
]


def upstream() -> Path:
    """The upstream directory, or a skip for a lone clone (no $AQUEDUCT_SHARED, no ../shared)."""
    if named := os.environ.get("AQUEDUCT_SHARED"):
        path = Path(named)
        assert path.is_dir(), f"AQUEDUCT_SHARED={named} is not a directory"
        return path
    sibling = ROOT.parent / "shared"
    if not sibling.is_dir():
        pytest.skip(f"no upstream to compare with: no {sibling} beside this clone and AQUEDUCT_SHARED unset")
    return sibling


@pytest.mark.parametrize("ours, theirs", PAIRS, ids=[p[0] for p in PAIRS])
def test_copy_matches_upstream(ours: str, theirs: str) -> None:
    source = upstream() / theirs
    assert source.is_file(), f"upstream {source} is missing: the copy {ours} cannot be checked"
    assert (ROOT / ours).read_bytes() == source.read_bytes(), f"{ours} differs from {source}"
