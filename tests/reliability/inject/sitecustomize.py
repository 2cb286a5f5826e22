"""Fault injection in a test's child process: a real SIGKILL (or SIGSTOP) at a chosen point of a write.

Never imported by aqueduct: a test puts this directory first on a child's
``PYTHONPATH`` (:func:`tests.reliability.injection.fault_env`) and names
the fault in ``AQUEDUCT_TEST_FAULT``; Python imports this module at start,
in the child and in every Python process it starts (Spark's workers
inherit the environment), and wraps the write at that point:

``acked:<phase>:<n>``
    the bridge's ``n``-th write of the acked offsets (``LOG/acked.json`` and
    its copy, :func:`aqueduct.bridge.storage.log.write_acked`): the process
    SIGKILLs itself when the write begins (``decided``: the ACKs are
    decided, nothing recorded), after the first copy (``half``), or after
    both (``recorded``: durable, the ACKs not sent yet).
``commit-file:<n>``
    the ``n``-th write of a source commit file (``LOG/commits/<consumer>.json``)
    in this process (of the log ``AQUEDUCT_TEST_FAULT_LOG`` names, when set:
    not another log's): the process stops itself (SIGSTOP) once the new
    content is on disk under its temporary name, before the rename, after
    creating ``AQUEDUCT_TEST_FAULT_MARK``; the test then SIGKILLs the
    whole bridge, the stopped process included.

Before the signal the process appends one line to ``AQUEDUCT_TEST_FAULT_MARK``
(``<fault> <pid>``), so the test knows the fault was reached.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

FAULT = os.environ.get("AQUEDUCT_TEST_FAULT", "")


def _reached(sig: signal.Signals) -> None:
    mark = os.environ.get("AQUEDUCT_TEST_FAULT_MARK")
    if mark:
        with open(mark, "a") as f:
            f.write(f"{FAULT} {os.getpid()}\n")
            f.flush()
            os.fsync(f.fileno())
    os.kill(os.getpid(), sig)


def _acked(phase: str, nth: int) -> None:
    from aqueduct.bridge.storage import acked, log

    writes = 0
    write_acked, write_copy = log.write_acked, acked.write_atomically
    copies = 0

    def counted_write(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal writes, copies
        writes += 1
        copies = 0
        if writes == nth and phase == "decided":
            _reached(signal.SIGKILL)
        write_acked(*args, **kwargs)
        if writes == nth and phase == "recorded":
            _reached(signal.SIGKILL)

    def copy_write(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal copies
        write_copy(*args, **kwargs)
        copies += 1
        if writes == nth and phase == "half" and copies == 1:
            _reached(signal.SIGKILL)

    log.write_acked = counted_write
    acked.write_atomically = copy_write


def _in_log(path: Path) -> bool:
    """Is ``path`` in the log the test names (any log if it names none)?"""
    log = os.environ.get("AQUEDUCT_TEST_FAULT_LOG")
    return log is None or path.resolve().parent.parent == Path(log).resolve()


def _commit_file(nth: int) -> None:
    writes = 0
    replace = os.replace

    def stopping_replace(src, dst, *args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal writes
        if Path(dst).parent.name == "commits" and Path(dst).suffix == ".json" and _in_log(Path(dst)):
            writes += 1
            if writes == nth:
                _reached(signal.SIGSTOP)
        return replace(src, dst, *args, **kwargs)

    os.replace = stopping_replace  # the rename that would publish the new content


if FAULT.startswith("acked:"):
    _, _phase, _nth = FAULT.split(":")
    _acked(_phase, int(_nth))
elif FAULT.startswith("commit-file:"):
    _commit_file(int(FAULT.split(":")[1]))
