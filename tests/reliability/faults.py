"""Seeded fault injection shared by the reliability tests.

Everything here is driven by an explicit ``random.Random`` so that a failing
run can be replayed from the seed printed in its summary line:

* :class:`Mutator` turns valid encoded frames into hostile input (bit flips,
  boundary values, cuts, splices) for the decoder fuzz tests;
* :func:`kill_points` picks when to SIGKILL a process;
* :class:`Child` runs one subprocess we own and kills it by its pid only;
* :class:`RssSampler` watches a process's resident memory (psutil);
* :func:`tally` counts what a sink holds against what was sent, ids and
  payloads, which is what every test asserts on (zero lost, duplicated or
  changed);
* :class:`Figures` is the one-line JSON summary each test prints and appends
  to the run's results file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

RESULTS_FILE = "reliability-results.jsonl"
"""Name of the results file, created in pytest's base temporary directory."""

# Byte values that sit on encoding edges: zero, varint/length continuation
# bits, sign bits, all ones.
_EDGE_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF)


class Mutator:
    """Derive hostile inputs from valid ones, reproducibly.

    Each mutation is a small, named edit: most inputs stay "almost valid",
    which is what reaches deep into a decoder (a random blob is refused at
    the first byte). ``mutate`` returns the name with the bytes so a failure
    report says what kind of damage the server could not handle.
    """

    KINDS = (
        "flip_bit",
        "edge_byte",
        "random_byte",
        "insert",
        "delete",
        "truncate",
        "duplicate",
        "splice",
        "garbage",
    )

    def __init__(self, rng: random.Random, corpus: Sequence[bytes] = ()) -> None:
        self.rng = rng
        self.corpus = list(corpus)

    def mutate(self, data: bytes, start: int = 0) -> tuple[str, bytes]:
        """One mutation of ``data``, touching only bytes at ``start`` and after.

        ``start`` protects a valid prefix (a handshake) so the damage lands
        in the part under test.
        """
        kind = self.rng.choice(self.KINDS)
        head, body = bytearray(data[:start]), bytearray(data[start:])
        return kind, bytes(head + self._apply(kind, body))

    def _apply(self, kind: str, body: bytearray) -> bytearray:
        rng = self.rng
        if kind == "garbage" or not body:
            return bytearray(rng.randbytes(rng.randint(1, 64)))
        at = rng.randrange(len(body))
        if kind == "flip_bit":
            body[at] ^= 1 << rng.randrange(8)
        elif kind == "edge_byte":
            body[at] = rng.choice(_EDGE_BYTES)
        elif kind == "random_byte":
            body[at] = rng.randrange(256)
        elif kind == "insert":
            body[at:at] = rng.randbytes(rng.randint(1, 8))
        elif kind == "delete":
            del body[at : at + rng.randint(1, 8)]
        elif kind == "truncate":
            del body[at:]
        elif kind == "duplicate":
            end = min(len(body), at + rng.randint(1, 32))
            body[end:end] = body[at:end]
        elif kind == "splice":
            other = rng.choice(self.corpus) if self.corpus else bytes(body)
            cut = rng.randrange(len(other) + 1)
            body = body[:at] + bytearray(other[cut:])
        return body


def kill_points(rng: random.Random, count: int, low: float, high: float) -> list[float]:
    """``count`` delays in seconds, uniform in ``[low, high)``, for SIGKILLs."""
    return [round(rng.uniform(low, high), 3) for _ in range(count)]


class Child:
    """One subprocess this test started; stopped by its own pid, never by name.

    Output goes to a file (not a pipe) so a chatty child can never block on
    a full pipe while the test is busy elsewhere.
    """

    def __init__(
        self, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None, *, own_session: bool = False
    ) -> None:
        """``own_session``: lead a session and process group of its own, as a service manager starts a service."""
        self.argv = list(argv)
        self.own_session = own_session
        self.log = log
        self.env = {**os.environ, **(env or {})}
        self.proc: asyncio.subprocess.Process | None = None
        self.kills = 0

    async def start(self) -> None:
        with self.log.open("ab") as out:
            out.write(f"--- start {' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdout=out, stderr=out, stdin=asyncio.subprocess.DEVNULL, env=self.env,
                start_new_session=self.own_session,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def kill(self) -> None:
        """SIGKILL: no cleanup, no flush, exactly what a crash looks like."""
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()
            self.kills += 1

    async def kill_tree(self) -> None:
        """SIGKILL the child and everything it started (a Spark JVM, Python workers).

        Models a machine or container crash: nothing survives to finish a
        micro-batch behind the restarted process's back. Descendants are
        found by pid before the kill, so only our own processes are touched.
        """
        if not self.running:
            return
        descendants = psutil.Process(self.pid).children(recursive=True)
        await self.kill()
        for p in descendants:
            with contextlib.suppress(psutil.Error):
                p.kill()
        await asyncio.to_thread(psutil.wait_procs, descendants, timeout=10)

    async def wait(self, timeout: float) -> int:
        """Exit status, killing the child if it has not exited within ``timeout``."""
        assert self.proc is not None
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            await self.kill()
            raise

    async def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then SIGKILL (with descendants) after ``timeout``: the polite end of a test."""
        if not self.running:
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), timeout)
        await self.kill_tree()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def console_script(name: str) -> list[str]:
    """argv prefix running an installed console script of this venv."""
    script = Path(sys.executable).parent / name
    if script.exists():
        return [str(script)]
    module = {
        "aqueduct-produce": "aqueduct.connector.producer.cli",
        "aqueduct-bridge": "aqueduct.bridge.app.cli",
    }[name]
    return [sys.executable, "-m", module]


class RssSampler:
    """Peak resident memory of a process (and, optionally, its children), sampled in a task."""

    def __init__(self, pid: int, interval: float = 0.2, children: bool = True) -> None:
        self.process = psutil.Process(pid)
        self.interval = interval
        self.children = children
        self.samples: list[int] = []
        self._task: asyncio.Task[None] | None = None

    def rss(self) -> int:
        """Bytes resident now: the process, plus its children (a Spark JVM, say) if asked."""
        total = 0
        family = self.process.children(recursive=True) if self.children else []
        for p in [self.process, *family]:
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
        return total

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(psutil.Error):
                self.samples.append(self.rss())
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def peak(self) -> int:
        return max(self.samples, default=0)


@dataclass
class Tally:
    """What a sink holds compared with what was sent."""

    sent: int
    in_sink: int
    duplicates: int
    lost: int
    unexpected: int
    #: records whose id was sent but whose payload is not the one sent with it
    changed: int

    @property
    def exactly_once(self) -> bool:
        """Every record sent is in the sink once, with its payload, and nothing else is."""
        return (self.lost, self.duplicates, self.unexpected, self.changed) == (0, 0, 0, 0)


def tally(sent: Mapping[Hashable, Mapping[int, object]], delivered: Iterable[tuple[Hashable, int, object]]) -> Tally:
    """Compare ``delivered`` (stream key, message id, payload) with ``sent`` ({id: payload} per stream key).

    Ids alone would pass a sink that stored the right ids with the wrong
    bytes; every verdict reads the payloads too.
    """
    counts: Counter[tuple[Hashable, int]] = Counter()
    changed = 0
    for key, mid, payload in delivered:
        counts[key, mid] += 1
        want = sent.get(key, {})
        changed += mid in want and want[mid] != payload
    return Tally(
        sent=sum(len(ids) for ids in sent.values()),
        in_sink=sum(counts.values()),
        duplicates=sum(n - 1 for n in counts.values() if n > 1),
        lost=sum(1 for key, ids in sent.items() for i in ids if (key, i) not in counts),
        unexpected=sum(n for (key, i), n in counts.items() if i not in sent.get(key, {})),
        changed=changed,
    )


@dataclass
class Figures:
    """A test's one-line summary: what was sent, what arrived, what was done to it."""

    test: str
    seed: int
    sent: int = 0
    in_sink: int = 0
    duplicates: int = 0
    lost: int = 0
    faults: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def count(self, t: Tally) -> None:
        self.sent, self.in_sink, self.duplicates, self.lost = t.sent, t.in_sink, t.duplicates, t.lost
        for name in ("unexpected", "changed"):
            if getattr(t, name):
                self.extra[name] = getattr(t, name)

    def line(self) -> str:
        data = asdict(self)
        data["seconds"] = round(time.monotonic() - data.pop("started"), 1)
        return json.dumps(data, sort_keys=True, default=str)

    def publish(self, results: Path) -> None:
        """Print the summary (``pytest -s`` shows it) and append it to ``results``."""
        line = self.line()
        print(f"\nRELIABILITY {line}")
        with results.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
