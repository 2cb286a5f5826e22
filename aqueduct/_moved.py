"""Old public import paths that keep working, with a warning, for one release.

When a module or a name moves, users' ``import`` lines must not break on
upgrade: the old path stays importable and warns once (``DeprecationWarning``)
with the new path to use. Two forms:

- a module that moved: its old file holds only ``moved_module(__name__, "new.path")``;
  importing it warns, and every name is looked up in the new module;
- a name that moved inside a package that still exists: the package's
  ``__getattr__`` calls :func:`moved_name`.

``tests/unit/test_public_api.py`` lists the public API and every old path
the docs ever showed, and checks that the first imports quietly and the
second warns and works.
"""

from __future__ import annotations

import sys
import warnings
from importlib import import_module
from typing import Any


def moved_module(old: str, new: str) -> None:
    """Make module ``old`` (being imported now) stand for module ``new``, warning once."""
    warnings.warn(
        f"{old} moved to {new}; import from {new} instead (the old path goes in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )
    target = import_module(new)
    shim = sys.modules[old]

    def __getattr__(name: str) -> Any:
        try:
            return getattr(target, name)
        except AttributeError:
            raise AttributeError(f"module {old!r} (moved to {new}) has no attribute {name!r}") from None

    shim.__getattr__ = __getattr__  # type: ignore[method-assign]
    shim.__all__ = list(getattr(target, "__all__", [n for n in vars(target) if not n.startswith("_")]))


_warned: set[str] = set()


def moved_name(package: str, name: str, new_module: str, new_name: str | None = None) -> Any:
    """``package.name`` is now ``new_module.new_name``: return it, warning on its first use."""
    new_name = new_name or name
    key = f"{package}.{name}"
    if key not in _warned:
        _warned.add(key)
        warnings.warn(
            f"{key} moved to {new_module}.{new_name}; import it from there instead "
            "(the old path goes in the next release)",
            DeprecationWarning,
            stacklevel=3,
        )
    return getattr(import_module(new_module), new_name)
