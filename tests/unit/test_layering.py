"""The layers of DESIGN.md import only downwards, and the sans-IO core stays free of I/O.

A violation here is how a sans-IO core quietly stops being testable without
sockets, so it is checked on every run rather than left to review.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "aqueduct"
#: bottom to top; ``records`` (what the worker side hands over and the log stores) sits
#: directly on ``wire``: both wings import it, and it imports nothing but the wire.
LAYERS = ["wire", "records", "auth", "proto", "runtime", "connector", "bridge"]
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
            "batch",
            "states",
            "events",
            "inbound",
            "outbound",
            "worker_session",
            "connector_session",
            "machine",
            "points",
            "errors",
            "carrying",
            "credentials",
        }
    ]
    auth_core = [p for p in _modules("auth") if p.stem != "watched"]  # watched re-reads the operator's files
    return _modules("wire") + _modules("records") + _modules("proto") + connector_core + auth_core


@pytest.mark.parametrize("path", _sans_io_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_sans_io_core_does_no_io(path: Path) -> None:
    roots = {name.split(".")[0] for name in _imports(path)}
    assert not roots & IO_MODULES, f"{path.relative_to(PACKAGE)} imports {roots & IO_MODULES}"


def test_storage_imports_no_connector() -> None:
    """The log depends on what a record is (``aqueduct.records``), not on a wire format's package."""
    for path in _modules("bridge/storage"):
        for name in _imports(path):
            assert not name.startswith("aqueduct.connector"), f"{path.relative_to(PACKAGE)} imports {name}"


TOOLING = {"demo", "bench", "interop", "tests"}


def test_the_product_package_imports_no_tooling() -> None:
    """Demo, benchmark and test tooling live beside ``aqueduct``, never inside or under it."""
    for path in sorted(PACKAGE.rglob("*.py")):
        roots = {name.split(".")[0] for name in _imports(path)}
        assert not roots & TOOLING, f"{path.relative_to(PACKAGE)} imports {roots & TOOLING}"


# ------------------------------------------------------------ rooms and cycles


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _edges(path: Path) -> set[str]:
    """Every project module ``path`` imports at run time, at any depth of the file (lazy imports too).

    ``from package import name`` counts as importing the submodule when
    ``name`` is one, else the package itself.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    typing_only = {  # ``if TYPE_CHECKING:`` blocks: annotations, not imports at run time
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return {name for name in found if name in MODULES}


GRAPH = {name: _edges(path) for name, path in MODULES.items()}


def test_no_import_cycle_anywhere() -> None:
    """A cycle, even through a lazy import inside one package, means two modules with one job."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for nxt in sorted(GRAPH[name]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name)


#: Rooms inside a wing, bottom to top; a room imports only itself and rooms
#: listed before it, never a sibling at its own level.
ROOMS = {
    "aqueduct.bridge": [{"storage"}, {"ingest", "source"}, {"network"}, {"app"}],
    "aqueduct.connector": [{""}, {"wallaroo"}, {"producer", "worker"}],
}


_PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def _room_of(wing: str, module: str) -> str | None:
    """The room of ``module`` in ``wing`` ("" for a module directly in the wing)."""
    if not module.startswith(wing + "."):
        return None
    first = module[len(wing) + 1 :].split(".")[0]
    return first if f"{wing}.{first}" in _PACKAGES else ""


@pytest.mark.parametrize("wing", sorted(ROOMS))
def test_rooms_import_only_downwards(wing: str) -> None:
    levels = ROOMS[wing]
    level_of = {room: i for i, rooms in enumerate(levels) for room in rooms}
    for name in sorted(GRAPH):
        room = _room_of(wing, name)
        if room is None or name == wing:
            continue
        for target in GRAPH[name]:
            other = _room_of(wing, target)
            if other is None or other == room or target == wing:
                continue
            assert level_of[other] < level_of[room], f"{name} ({room}) imports {target} ({other})"


SPARK_ROOMS = tuple(f"aqueduct.bridge.{room}" for room in ("source", "app"))


def test_pyspark_only_in_the_spark_rooms() -> None:
    for name, path in sorted(MODULES.items()):
        if name.startswith(SPARK_ROOMS):
            continue
        roots = {imported.split(".")[0] for imported in _imports(path)}
        assert "pyspark" not in roots, f"{name} imports pyspark outside the Spark rooms"


@pytest.mark.parametrize(
    "module",
    [
        "aqueduct.bridge.ingest.service",
        "aqueduct.bridge.storage.log",
        "aqueduct.bridge.source.planning",
        "aqueduct.bridge.app.status",
        "aqueduct.connector.worker.server",
    ],
)
def test_importing_a_non_spark_module_loads_no_pyspark(module: str) -> None:
    """What a process imports decides what it pays: a bridge-side module must not drag the JVM client in."""
    code = f"import sys, {module}; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------ the runtime's rooms

#: What each room of ``aqueduct.runtime`` may import of the runtime besides
#: itself. The handles know neither the driver nor QUIC; the driver knows a
#: QUIC stack only as the seam's ``QuicTransport``, and a backend knows the
#: driver only as the seam's ``TransportDriver``: the QUIC stack is an
#: implementation detail behind one seam, and either side changes alone.
RUNTIME_ROOMS = {
    "handles": set(),
    "driver": {"handles", "transport"},
    "backends": {"transport", "retry_hint"},
}
#: The one module that picks a QUIC backend and wires it to a driver and handles.
RUNTIME_WIRING = "aqueduct.runtime.endpoints"


def _runtime_part(module: str) -> str | None:
    """The room (or top-level module) of the runtime that ``module`` is in, if it is in the runtime."""
    if not module.startswith("aqueduct.runtime."):
        return None
    return module.split(".")[2]


@pytest.mark.parametrize("room", sorted(RUNTIME_ROOMS))
def test_runtime_rooms_import_only_what_they_may(room: str) -> None:
    allowed = RUNTIME_ROOMS[room] | {room}
    for name in sorted(GRAPH):
        if _runtime_part(name) != room:
            continue
        for target in sorted(GRAPH[name]):
            part = _runtime_part(target)
            if target.startswith("aqueduct.runtime") and part not in allowed:
                pytest.fail(f"{name} ({room}) imports {target}")


def test_the_driver_and_the_backends_are_wired_only_by_the_endpoints() -> None:
    """Nothing else (handles, connector, bridge) reaches a QUIC backend or the driver directly."""
    inner = {"driver", "backends"}
    for name in sorted(GRAPH):
        if _runtime_part(name) in inner or name == RUNTIME_WIRING:
            continue
        reached = sorted(t for t in GRAPH[name] if _runtime_part(t) in inner)
        assert not reached, f"{name} imports {reached}: only {RUNTIME_WIRING} wires them"
