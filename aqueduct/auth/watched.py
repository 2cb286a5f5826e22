"""An operator's file (ACL, revocations) re-read when it changes, the last good version kept.

The one I/O module of :mod:`aqueduct.auth` (the others parse and decide,
and never touch a file). Each :meth:`WatchedFile.current` does one
``os.stat``: if the file's modification time, size or inode changed, it is
read and parsed again. An edit that does not parse (or a file gone
missing) keeps the last good version in force, so a typo cannot open the
door or lock every producer out, and is reported once, by a log line and
by :attr:`WatchedFile.problem`, until the file changes again.

Write the file by renaming a finished copy over it (what most editors and
configuration tools do): a reader can otherwise see a half-written file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from aqueduct.auth.textfile import AuthFileError

__all__ = ["WatchedFile"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_Stamp = tuple[int, int, int, int]  # mtime_ns, ctime_ns, size, inode


def _stamp(path: Path) -> _Stamp:
    st = os.stat(path)
    return st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino


class WatchedFile(Generic[T]):
    """``parse(text, source)`` of ``path``, kept current.

    The first read happens here, and its failure (``OSError``,
    :class:`~aqueduct.auth.textfile.AuthFileError`) is raised: a bridge must
    not start on a file it cannot use.
    """

    def __init__(self, path: str | os.PathLike[str], parse: Callable[[str, str], T]) -> None:
        self.path = Path(path)
        self._parse = parse
        self._stamp: _Stamp | None = _stamp(self.path)
        self._value = parse(self.path.read_text(encoding="utf-8"), str(self.path))
        #: what is wrong with the file on disk now (None when its content is in force)
        self.problem: str | None = None

    def current(self) -> T:
        """The last good parse of the file, re-read first if it changed since the last call."""
        try:
            stamp = _stamp(self.path)
        except OSError as exc:
            if self._stamp is not None:  # gone (or unreadable) since the last call
                self._stamp = None
                self._report(f"{self.path}: {exc.strerror}")
            return self._value
        if stamp == self._stamp:
            return self._value
        self._stamp = stamp
        try:
            self._value = self._parse(self.path.read_text(encoding="utf-8"), str(self.path))
        except AuthFileError as exc:
            self._report(str(exc))
        except OSError as exc:
            self._report(f"{self.path}: {exc.strerror}")
        except UnicodeDecodeError:
            self._report(f"{self.path}: not UTF-8 text")
        else:
            if self.problem is not None:
                logger.warning("%s is good again and in force", self.path)
            else:
                logger.info("re-read %s", self.path)
            self.problem = None
        return self._value

    def _report(self, problem: str) -> None:
        self.problem = problem
        logger.error("%s; the previous version stays in force until the file is fixed", problem)
