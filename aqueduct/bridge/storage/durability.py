"""Making many files durable at once: one ``syncfs`` instead of an fsync per file.

A group commit over thousands of streams writes a segment and an index
entry in each. An fsync per file costs a journal commit each (about 0.1 ms
on this project's machines, so 2 x 10,000 streams = 2 s per commit, which
is what kept a fleet's records from becoming durable in time). Linux's
``syncfs(2)`` makes every written file of a file system durable in one
call, and reports write-back errors since Linux 5.8.

:class:`SyncGroup` collects the files (and the directories whose entries
changed) that one step of a commit must make durable, then picks: an
fsync per file for a few files (a ``syncfs`` also flushes other programs'
dirty data on that file system, which a small commit should not pay
for), one ``syncfs`` per file system for many, and fsyncs everywhere
``syncfs`` does not exist (macOS, other libcs).
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from pathlib import Path

SYNCFS_FROM_FILES = 16
"""A group of at least this many files and directories is synced with ``syncfs``."""


def _load_syncfs() -> Callable[[int], int] | None:
    """libc's ``syncfs`` from the symbols already loaded (the interpreter links libc).

    Not ``ctypes.util.find_library("c")``: on Linux it runs ``ldconfig -p``
    in a child process, about 36 ms, in every process that imports the log,
    Spark's Python workers included (four of them before the first ACK).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syncfs = libc.syncfs
    except (OSError, AttributeError):
        return None
    syncfs.argtypes = [ctypes.c_int]
    syncfs.restype = ctypes.c_int
    return syncfs  # type: ignore[no-any-return]


_SYNCFS = _load_syncfs()


def fsync_path(path: str | Path) -> None:
    """fsync a file or directory by name: for a directory, its entries' changes (create, rename, unlink)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SyncGroup:
    """Files and directories to make durable together, with as few calls as it takes.

    Add open descriptors with :meth:`add_file` (the caller keeps them open
    until :meth:`sync` returns), closed files with :meth:`add_path`, and
    directories whose entries changed with :meth:`add_dir`; :meth:`sync` returns once all of them are durable, or
    raises the ``OSError`` that says why not.
    """

    def __init__(self, *, use_syncfs: bool = True) -> None:
        self._files: list[int] = []
        self._paths: list[str] = []
        self._dirs: list[str] = []
        self._use_syncfs = use_syncfs and _SYNCFS is not None

    def add_file(self, fd: int) -> None:
        self._files.append(fd)

    def add_path(self, path: str | Path) -> None:
        """A file written and closed already (a group of thousands must not hold their descriptors)."""
        self._paths.append(os.fspath(path))

    def add_dir(self, directory: str | Path) -> None:
        self._dirs.append(os.fspath(directory))

    def __len__(self) -> int:
        return len(self._files) + len(self._paths) + len(self._dirs)

    def sync(self) -> None:
        """Make everything added durable, then start over empty."""
        files, paths, dirs = self._files, self._paths, self._dirs
        self._files, self._paths, self._dirs = [], [], []
        if self._use_syncfs and len(files) + len(paths) + len(dirs) >= SYNCFS_FROM_FILES:
            # a file lives on its directory's file system
            _syncfs_each_device(files, [*dirs, *map(os.path.dirname, paths)])
            return
        for fd in files:
            os.fsync(fd)
        for path in [*paths, *dict.fromkeys(dirs)]:
            fsync_path(path)


def _syncfs_each_device(files: list[int], dirs: list[str]) -> None:
    """One ``syncfs`` per file system the files and directories live on."""
    assert _SYNCFS is not None
    devices: dict[int, int] = {}  # st_dev -> an open descriptor on it
    for fd in files:
        devices.setdefault(os.fstat(fd).st_dev, fd)
    opened: list[int] = []
    try:
        for d in dict.fromkeys(dirs):
            dev = os.stat(d).st_dev
            if dev not in devices:
                fd = os.open(d, os.O_RDONLY)
                opened.append(fd)
                devices[dev] = fd
        for fd in devices.values():
            if _SYNCFS(fd) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"syncfs: {os.strerror(err)}")
    finally:
        for fd in opened:
            os.close(fd)


__all__ = ["SYNCFS_FROM_FILES", "SyncGroup", "fsync_path"]
