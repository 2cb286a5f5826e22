"""The ``SPARK_HOME`` the bridge launches Spark's JVM with: pyspark's own, less its zipped copy of pyspark.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first
on the path of every Python process it starts. A pip-installed pyspark
ships that zip with sources only, and Python compiles what it imports
from a zip at every start (it cannot cache bytecode there): each Python
worker then spends about 0.5 s of CPU compiling pyspark before it does
anything, and ``serve``'s first ACK waited on five of them, one after
the other (docs/performance.md, "The Python workers' start"). The same
pyspark is installed, compiled, beside that zip: it is the one the
bridge's own interpreter imports.

So when ``SPARK_HOME`` is unset, pyspark's directory holds that zip and
Spark's Python workers run this very interpreter (``PYSPARK_PYTHON``),
the JVM is launched with a ``SPARK_HOME`` that is pyspark's directory
without ``python``: a directory of symbolic links, one to each other
entry (``bin``, ``jars``, ...), kept in the cache
(:func:`~aqueduct.bridge.app.class_archive.cache_dir`). Spark's paths into
``python/lib`` then name nothing, and its workers import the installed,
compiled pyspark. A ``SPARK_HOME`` the user set (a Spark distribution)
is theirs, and used as it is.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

PREFIX = "spark-home-"
ZIPPED = Path("python", "lib", "pyspark.zip")  # what Spark puts first on its Python workers' path
LEFT_OUT = "python"


def is_this_interpreter(python: str) -> bool:
    """True if the interpreter ``python`` names (a path, through links) is the one running here."""
    return os.path.realpath(python) == os.path.realpath(sys.executable)


def workers_run_this_interpreter() -> bool:
    """True if Spark's Python processes (``PYSPARK_PYTHON``, ``PYSPARK_DRIVER_PYTHON``) are this interpreter."""
    pythons = [os.environ.get(name) for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")]
    return pythons[0] is not None and all(is_this_interpreter(p) for p in pythons if p is not None)


def launch_home(pyspark_home: str, cache: Path) -> str:
    """The ``SPARK_HOME`` to launch the JVM with: a linked copy of ``pyspark_home`` without ``python``.

    ``pyspark_home`` itself when it has no zipped pyspark, when the workers
    run another interpreter (which may have no pyspark but the zip's), or
    when the copy cannot be made (no cache).
    """
    home = Path(pyspark_home)
    if not (home / ZIPPED).is_file() or not workers_run_this_interpreter():
        return pyspark_home
    entries = sorted(e.name for e in home.iterdir() if e.name != LEFT_OUT)
    key = hashlib.sha256("\0".join([str(home.resolve()), *entries]).encode()).hexdigest()[:16]
    linked = cache / f"{PREFIX}{key}"
    try:
        if not linked.is_dir():
            _link(home, entries, linked)
        prune(cache)
    except OSError as exc:
        logger.debug("launching Spark from %s as it is: %r", pyspark_home, exc)
        return pyspark_home
    return str(linked)


def _link(home: Path, entries: list[str], linked: Path) -> None:
    """Make ``linked`` whole or not at all: links made beside it, then renamed (another bridge may race)."""
    linked.parent.mkdir(parents=True, exist_ok=True)
    partial = linked.with_name(f"{linked.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    for name in entries:
        (partial / name).symlink_to(home.resolve() / name)
    try:
        partial.rename(linked)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
        if not linked.is_dir():  # not a racing bridge's copy: a real failure
            raise


def prune(cache: Path) -> None:
    """Delete the linked homes of pyspark installations that are gone, and partial ones whose maker is."""
    for path in cache.glob(f"{PREFIX}*"):
        if path.name.endswith(".partial"):
            pid = path.name.removesuffix(".partial").rpartition(".")[2]
            gone = not pid.isdigit() or not Path("/proc", pid).exists()
        else:
            gone = not (path / "jars").exists()  # a dangling link: that pyspark was uninstalled or moved
        if gone:
            shutil.rmtree(path, ignore_errors=True)
