"""The examples in docs/usage.md run as written (each is a complete script)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

USAGE = Path(__file__).resolve().parents[2] / "docs" / "usage.md"
EXAMPLES = [
    block
    for block in re.findall(r"```python\n(.*?)```", USAGE.read_text(), re.DOTALL)
    if "asyncio.run(" in block
]


@pytest.mark.parametrize("source", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_usage_example_runs(source, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(source)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr


def test_three_level_tree_example_prints_squares(tmp_path):
    [tree] = [block for block in EXAMPLES if "level 3" in block]
    script = tmp_path / "tree.py"
    script.write_text(tree)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.stdout.strip().splitlines()[-1] == "[0, 1, 4, 9, 16]", result.stderr
