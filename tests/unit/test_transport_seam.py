"""The QUIC stack stays behind its backend: no other module of aqueduct imports it.

The driver, the endpoints, the handles, the connector and the bridge reach
QUIC only through :class:`aqueduct.runtime.transport.QuicTransport` and
the backend's ``listen`` / ``dial``. A module that imports aioquic outside
the backend ties the product to one stack again; this test names it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import aqueduct

PACKAGE = Path(aqueduct.__file__).parent
#: Each QUIC stack and the modules of its backend: the only ones that may import it.
BACKENDS = {
    "aioquic": {
        "runtime/backends/aioquic.py",
        "runtime/backends/aioquic_internals.py",
        "runtime/backends/quic_server.py",
        "runtime/backends/tls.py",
    },
    "aiopquic": {"runtime/backends/aiopquic.py"},
    "qh3": set(),
}
STACKS = tuple(BACKENDS)


def stacks_imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update(name.split(".")[0] for name in names if name.split(".")[0] in STACKS)
    return found


def test_only_a_stacks_own_backend_modules_import_it() -> None:
    outside = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE))
        strays = sorted(stack for stack in stacks_imported(path) if name not in BACKENDS[stack])
        if strays:
            outside[name] = strays
    assert outside == {}, f"QUIC stack imported outside its backend: {outside}"


def test_the_backend_modules_listed_here_exist() -> None:
    # A backend module renamed or removed must be taken off the list, not silently ignored.
    assert all((PACKAGE / name).is_file() for names in BACKENDS.values() for name in names)
