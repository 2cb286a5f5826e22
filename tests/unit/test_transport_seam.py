"""The QUIC stack stays behind its backend, and a backend knows the driver only through the seam.

The driver, the endpoints, the handles, the connector and the bridge reach
QUIC only through :class:`aqueduct.runtime.transport.QuicTransport` and
the backend's ``listen`` / ``dial``. A module that imports aioquic outside
the backend ties the product to one stack again; this test names it.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import aqueduct
from aqueduct.runtime.driver.core_driver import Driver
from aqueduct.runtime.transport import TransportDriver

PACKAGE = Path(aqueduct.__file__).parent
#: Each QUIC stack and the modules of its backend: the only ones that may import it.
BACKENDS = {
    "aioquic": {
        "runtime/backends/aioquic.py",
        "runtime/backends/aioquic_internals.py",
        "runtime/backends/quic_server.py",
        "runtime/backends/session_tickets.py",
        "runtime/backends/tls.py",
        "runtime/backends/tls_failures.py",  # aioquic's certificate check, for both backends' clients
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


def _seam_members() -> set[str]:
    return {name for name in vars(TransportDriver) if not name.startswith("_")} | set(
        TransportDriver.__annotations__
    )


def test_the_backends_call_nothing_of_the_driver_beyond_the_seam() -> None:
    """What a backend reads of ``driver`` is what ``TransportDriver`` lists: the driver can change behind it."""
    used: dict[str, set[str]] = {}
    for path in sorted((PACKAGE / "runtime" / "backends").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and ast.unparse(node.value).split(".")[-1] == "driver":
                used.setdefault(node.attr, set()).add(path.name)
    assert used, "no backend feeds a driver: this test reads the wrong files"
    beyond = {name: sorted(files) for name, files in used.items() if name not in _seam_members()}
    assert beyond == {}, f"backends call the driver beyond TransportDriver: {beyond}"


def test_the_driver_offers_every_call_of_the_seam() -> None:
    for name in sorted(_seam_members() - set(TransportDriver.__annotations__)):
        ours = inspect.signature(getattr(Driver, name)).parameters
        seam = inspect.signature(getattr(TransportDriver, name)).parameters
        assert list(ours) == list(seam), f"Driver.{name}{list(ours)} is not the seam's {list(seam)}"
