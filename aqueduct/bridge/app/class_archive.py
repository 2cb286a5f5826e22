"""Spark's JVM classes archived once, then mapped at every start (Java's class-data sharing).

Much of the Spark driver's start is its JVM loading and verifying the
thousands of classes it needs from ~280 jars. Java 13+ can write the
classes a run loaded into an archive when it exits
(``-XX:ArchiveClassesAtExit``) and map them, already parsed and verified,
at the next start (``-XX:SharedArchiveFile``).

So a ``serve`` that finds no archive asks its JVM to write one at exit, and
once it has stopped waits for that JVM (:func:`keep_archive`, once) and
moves what it wrote into place. The name the JVM writes to is its own
(``.partial``): a half-written archive crashes the JVM that maps it, so only
one whose JVM exited 0 is ever used. Archives live in the user's cache
(``$XDG_CACHE_HOME/aqueduct``, else ``~/.cache/aqueduct``;
``AQUEDUCT_CACHE_DIR`` overrides it, ``AQUEDUCT_CLASS_ARCHIVE=0`` turns all
of this off), named after what they were made from (this Java binary,
these Spark jars), so another Java or pyspark makes its own; those of
installations that are gone, and partial ones their writer left, are
deleted at the next start. A JVM that cannot use an archive after all
(its classes changed in place) runs without it, silently (``-Xlog:cds=off``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from aqueduct.logs import fields

logger = logging.getLogger(__name__)

PREFIX = "spark-classes-"
PARTIAL = ".partial"
#: seconds a stopped bridge waits for its JVM to write the archive; the first time only
KEEP_WAIT = 120.0
#: what a JVM given an archive it cannot use would otherwise say at every start
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def cache_dir() -> Path:
    """``AQUEDUCT_CACHE_DIR``, else ``$XDG_CACHE_HOME/aqueduct``, else ``~/.cache/aqueduct``."""
    if os.environ.get("AQUEDUCT_CACHE_DIR"):
        return Path(os.environ["AQUEDUCT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aqueduct"


@dataclass(frozen=True)
class ClassArchive:
    """The archive of one Java and one Spark installation; whether this run's JVM writes it."""

    path: Path
    made_from: dict[str, str]  # the Java and the jars it describes, kept beside it (``.json``)
    writes: bool  # none yet: this run's JVM writes it at exit, to :attr:`partial`

    @property
    def partial(self) -> Path:
        return self.path.with_name(f"{self.path.name}.{os.getpid()}{PARTIAL}")

    def java_options(self) -> list[str]:
        """Write the archive at exit if there is none yet, else map it."""
        if self.writes:
            return [f"-XX:ArchiveClassesAtExit={self.partial}", *QUIET]
        return [f"-XX:SharedArchiveFile={self.path}", *QUIET]


def class_archive(spark_home: str) -> ClassArchive | None:
    """The archive for ``java`` and the Spark in ``spark_home``.

    None when turned off, when there is nowhere to keep it, or while
    another bridge's JVM is writing it (one writer at a time: bridges
    started together do not all pay for writing it).
    """
    if os.environ.get("AQUEDUCT_CLASS_ARCHIVE", "1") == "0":
        return None
    java = Path(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    jars = Path(spark_home, "jars")
    if java is None or not Path(java).is_file() or not jars.is_dir():
        return None
    java = Path(java).resolve()
    made_from = {  # the JVM's class path names the home's jars (a linked home's too): one archive per home
        "java": str(java), "java_mtime": str(java.stat().st_mtime_ns), "spark_home": str(Path(spark_home).absolute()),
        "spark_jars": str(jars.resolve()), "spark_jars_mtime": str(jars.stat().st_mtime_ns),
    }  # fmt: skip
    key = hashlib.sha256(json.dumps(made_from, sort_keys=True).encode()).hexdigest()[:16]
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        prune(directory)
    except OSError:  # no cache to keep it in: start as before
        return None
    path = directory / f"{PREFIX}{key}.jsa"
    if not path.is_file() and any(directory.glob(f"{path.name}.*{PARTIAL}")):
        return None  # another bridge's JVM is writing it (prune left only the living writers' partials)
    return ClassArchive(path, made_from, writes=not path.is_file())


def keep_archive(archive: ClassArchive, jvm: subprocess.Popen[bytes], wait: float = KEEP_WAIT) -> bool:
    """After Spark stopped: end the JVM (closing its stdin), let it write the archive, move that into place.

    True if the archive is in place now. Only for a run whose JVM writes
    one (:attr:`ClassArchive.writes`); a JVM that ended already (killed, or
    stopped by a signal of its own) wrote none worth keeping.
    """
    if jvm.poll() is not None:  # it ended under the bridge (said so already): nothing written to wait for
        archive.partial.unlink(missing_ok=True)
        return False
    logger.info(
        "writing Spark's class archive (once; later starts map it): %s", archive.path,
        extra=fields(event="class_archive"),
    )  # fmt: skip
    began = time.monotonic()
    if jvm.stdin is not None:
        jvm.stdin.close()  # pyspark's gateway exits when its stdin ends
    try:
        code = jvm.wait(wait)
    except subprocess.TimeoutExpired:
        logger.warning("Spark's JVM did not write its class archive within %g s; a later start tries again", wait)
        return False
    if code != 0 or not archive.partial.is_file():
        logger.warning("Spark's JVM ended (status %s) without a class archive; a later start tries again", code)
        archive.partial.unlink(missing_ok=True)
        return False
    try:
        archive.path.with_suffix(".json").write_text(json.dumps(archive.made_from, indent=1))
        os.replace(archive.partial, archive.path)
    except OSError as exc:  # e.g. the cache's disk is full: the next start tries again
        logger.warning("cannot keep Spark's class archive: %s", exc)
        archive.partial.unlink(missing_ok=True)
        return False
    logger.info(
        "Spark's class archive written in %.1f s (%d MB)", time.monotonic() - began, archive.path.stat().st_size >> 20,
        extra=fields(event="class_archive_written"),
    )  # fmt: skip
    return True


def prune(directory: Path) -> None:
    """Delete the partial archives of runs that are gone, and the archives of Java or Spark installations that are."""
    for path in directory.glob(f"{PREFIX}*.jsa*"):
        if path.name.endswith(PARTIAL):
            pid = path.name.removesuffix(PARTIAL).rpartition(".")[2]
            if not pid.isdigit() or not Path("/proc", pid).exists():
                path.unlink(missing_ok=True)
            continue
        sidecar = path.with_suffix(".json")
        try:
            made_from = json.loads(sidecar.read_text())
        except (OSError, ValueError):
            made_from = {}
        if not all(Path(made_from.get(part, "")).is_absolute() and Path(made_from[part]).exists()
                   for part in ("java", "spark_home", "spark_jars")):  # fmt: skip
            path.unlink(missing_ok=True)
            sidecar.unlink(missing_ok=True)
