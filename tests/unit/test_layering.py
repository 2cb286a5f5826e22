"""The layers of DESIGN.md import only downwards, and the sans-IO core stays free of I/O.

A violation here is how a sans-IO core quietly stops being testable without
sockets, so it is checked on every run rather than left to review.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "aqueduct"
LAYERS = ["wire", "proto", "runtime", "connector", "bridge"]  # bottom to top
IO_MODULES = {"asyncio", "aioquic", "socket", "time", "selectors", "threading"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", LAYERS)
def test_layer_imports_only_downwards(layer: str) -> None:
    allowed = set(LAYERS[: LAYERS.index(layer) + 1])
    for path in _modules(layer):
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "aqueduct" and len(parts) > 1 and parts[1] in LAYERS:
                assert parts[1] in allowed, f"{path.relative_to(PACKAGE)} imports {name}"


def _sans_io_modules() -> list[Path]:
    connector_core = [
        p
        for p in _modules("connector")
        if p.stem
        in {
            "frames",
            "states",
            "events",
            "inbound",
            "outbound",
            "worker_session",
            "connector_session",
            "machine",
            "points",
        }
    ]
    return _modules("wire") + _modules("proto") + connector_core


@pytest.mark.parametrize("path", _sans_io_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_sans_io_core_does_no_io(path: Path) -> None:
    roots = {name.split(".")[0] for name in _imports(path)}
    assert not roots & IO_MODULES, f"{path.relative_to(PACKAGE)} imports {roots & IO_MODULES}"


TOOLING = {"demo", "bench", "interop", "tests"}


def test_the_product_package_imports_no_tooling() -> None:
    """Demo, benchmark and test tooling live beside ``aqueduct``, never inside or under it."""
    for path in sorted(PACKAGE.rglob("*.py")):
        roots = {name.split(".")[0] for name in _imports(path)}
        assert not roots & TOOLING, f"{path.relative_to(PACKAGE)} imports {roots & TOOLING}"
