"""The files an operator and a running bridge talk through about a drain, and the operator's wait.

``aqueduct-bridge drain --log DIR`` writes :data:`REQUEST_FILE`; the
bridge takes it (removes it) and answers in :data:`STATE_FILE` (see
:mod:`.drain` for why files); whether a bridge runs on the directory is
the log's writer lock. :func:`wait_for_drain` is the command's side:
it follows the state file until the bridge has exited.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aqueduct.bridge.storage.index import write_atomically

REQUEST_FILE = "DRAIN"
"""In the log directory: an operator asks the running bridge to drain (``aqueduct-bridge drain``)."""
STATE_FILE = "drain.json"
"""In the log directory: what the draining bridge waits for, then how its drain ended."""
LOCK_FILE = "LOCK"  # the log's writer lock (aqueduct.bridge.storage.log)
TAKE_TIMEOUT = 10.0
"""Seconds a running bridge has to take a request (it looks twice a second) before the command gives up."""
TAKEN = ("draining", "drained")  # the states of a bridge that took a drain request
WAIT_POLL = 0.25  # seconds between the command's looks at the state file and the lock


def request_drain(log_dir: Path) -> str:
    """Ask the bridge running on ``log_dir`` to drain; return the request's id (echoed in its state)."""
    request = f"{os.getpid()}-{time.time_ns()}"
    write_atomically(log_dir / REQUEST_FILE, json.dumps({"request": request, "at": time.time()}).encode())
    return request


def take_request(log_dir: Path) -> str | None:
    """The bridge's side: the id of a pending request (removing it), or None."""
    path = log_dir / REQUEST_FILE
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError:  # half-written by hand: a request all the same
        doc = {}
    path.unlink(missing_ok=True)
    return str(doc.get("request", "unnamed"))


def write_state(log_dir: Path, doc: Mapping[str, Any]) -> None:
    """The bridge's answer: its drain's phase and what it waits for (atomically: a reader never sees half)."""
    write_atomically(log_dir / STATE_FILE, json.dumps(doc).encode())


def read_state(log_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((log_dir / STATE_FILE).read_bytes())
    except (FileNotFoundError, ValueError):
        return None


def clear_leftovers(log_dir: Path) -> bool:
    """At start: drop a request and a state left by an earlier run; say whether a request was dropped.

    A drain is asked of the bridge that runs; a request that outlived it
    (written as it stopped) must not retire the next one unasked.
    """
    (log_dir / STATE_FILE).unlink(missing_ok=True)
    return take_request(log_dir) is not None


def bridge_running(log_dir: Path) -> bool:
    """Does a process hold the log's writer lock (a bridge serving it)?

    Tried with a shared lock that is dropped at once; a bridge starting in
    that very instant would find the log locked and exit with that error.
    """
    try:
        fd = os.open(log_dir / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the probe's lock, if it got one
    return False


@dataclass(frozen=True)
class DrainOutcome:
    """How ``drain`` ended: ``state`` is ``drained`` (``draining``: taken, with ``--no-wait``), or why not; ``doc`` the bridge's last state."""

    state: str
    seconds: float
    doc: dict[str, Any]

    @property
    def drained(self) -> bool:
        return self.state == "drained"

    @property
    def taken(self) -> bool:
        """The bridge took the request: it drains (``--no-wait`` returned at once) or has drained."""
        return self.state in TAKEN


def wait_for_drain(
    log_dir: Path,
    request: str,
    timeout: float | None = None,
    progress: Callable[[str], None] = lambda line: None,
    answered: bool = False,
) -> DrainOutcome:
    """Wait until the bridge that took ``request`` has exited (or ``timeout`` seconds), telling ``progress`` what it waits for.

    The bridge writes its last state before it frees the log's lock, so a
    free lock with a state still ``draining`` means it was killed. A
    bridge that does not drain answers with why (``refused``) and runs on.
    With ``answered`` (``drain --no-wait``) it returns as soon as the bridge
    took the request: state ``draining`` (or ``drained``, holding nothing),
    unless it was refused or not taken.
    """
    started = time.monotonic()
    said: str | None = None
    doc: dict[str, Any] = {}
    while True:
        running = bridge_running(log_dir)  # first: the state read after it is the last one if it is free
        doc = read_state(log_dir) or {}
        elapsed = time.monotonic() - started
        ours = doc.get("request") == request
        if ours and doc.get("refused"):  # a bridge that does not drain (SparkBridge) said why, and serves on
            return DrainOutcome(str(doc["refused"]), elapsed, doc)
        if not ours and (log_dir / REQUEST_FILE).exists() and elapsed > TAKE_TIMEOUT:
            (log_dir / REQUEST_FILE).unlink(missing_ok=True)
            return DrainOutcome(
                f"the bridge did not take the drain request within {TAKE_TIMEOUT:.0f} s (a bridge older than "
                "this command does not drain)", elapsed, doc,
            )  # fmt: skip
        if answered and ours and doc.get("state") in TAKEN:
            return DrainOutcome(str(doc["state"]), elapsed, doc)
        if ours and doc.get("state") not in ("draining", None):
            if not running:  # its last word, and the log is free: it has exited
                return DrainOutcome(str(doc["state"]), elapsed, doc)
        elif not running:
            return DrainOutcome("the bridge ended before its drain finished, without a word (killed?)", elapsed, doc)
        line = (doc.get("waiting") or {}).get("line") if ours else None
        if line and line != said:
            progress(line)
            said = line
        if timeout is not None and elapsed > timeout:
            return DrainOutcome(f"still draining after {timeout:g} s: {said or 'no word from the bridge yet'}", elapsed, doc)
        time.sleep(WAIT_POLL)
