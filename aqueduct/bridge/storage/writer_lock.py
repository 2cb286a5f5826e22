"""The log's writer lock: one process writes a log, and a second one is told which process that is.

The lock is an ``flock`` on ``LOG/LOCK``, which the kernel drops when its
holder exits, however it exits: a crashed bridge never leaves a log locked.
The holder writes its process id into the file, so that a second bridge
(or ``serve``'s check before it creates anything) can name the process to
stop instead of only saying the log is busy. The file's content is read
only while its lock is held, so a pid left by a process that exited is
never reported.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from aqueduct.bridge.storage.errors import LogLocked

LOCK_FILE = "LOCK"


def take_writer_lock(log_dir: Path) -> int:
    """Lock ``log_dir`` for this process and return the lock's descriptor (closing it releases the lock).

    Raises :class:`LogLocked`, naming the holder, if another process has it.
    """
    fd = os.open(log_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _pid_in(fd)
        os.close(fd)
        raise LogLocked(f"log {str(log_dir)!r} is already open for writing {_by(holder)}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def writer_lock_holder(log_dir: Path) -> str | None:
    """Who holds ``log_dir``'s writer lock ("by process 1234"), or None if nobody does. Only looks.

    Probed with a shared lock that is dropped at once (a read-only
    descriptor takes one); a log directory that does not exist yet is free.
    """
    try:
        fd = os.open(log_dir / LOCK_FILE, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _by(_pid_in(fd))
    finally:
        os.close(fd)  # releases the probe's lock, if it got one
    return None


def _pid_in(fd: int) -> int | None:
    """The process id the holder wrote, if it wrote one yet (a holder of an older version writes none)."""
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None


def _by(pid: int | None) -> str:
    return f"by process {pid}" if pid is not None else "by another process"
