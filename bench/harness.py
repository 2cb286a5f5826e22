"""The two processes of a benchmark: start them, send them work, always clean up.

A :class:`WorkerPair` is a server process and a client process
(``python -m bench.worker``), pinned to different cores (or, where a
benchmark asks, not pinned at all). :meth:`WorkerPair.run`
has the server listen on 127.0.0.1, then the client connect and send; each
reports its result. Every process is in its own session (process group), so
a timeout or failure kills exactly the processes this pair started, children
included, and the next run starts a fresh pair.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
SERVER_CPU = 0
CLIENT_CPU = 1


class BenchError(RuntimeError):
    """A benchmark process failed, printed no result, or ran past its time bound."""


class _Side:
    """One worker process whose ``READY``/``RESULT``/``ERROR`` lines a thread reads."""

    def __init__(self, side: str, certs: Path, cpu: int, log_dir: Path | None = None) -> None:
        self.name = side
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._stderr: IO[bytes] = open(log_dir / f"{side}-{time.strftime('%H%M%S')}.log", "w+b")
        else:
            self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.worker", side, "--certs", str(certs), "--cpu", str(cpu)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"},
        )
        self.lines: queue.Queue[tuple[str, Any]] = queue.Queue()
        assert self.proc.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            kind, _, rest = line.strip().partition(" ")
            if kind in ("READY", "RESULT", "ERROR"):
                self.lines.put((kind, json.loads(rest)))
        self.lines.put(("EOF", None))

    def send(self, command: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise BenchError(f"{self.name}: worker is gone ({exc}){self.stderr_tail()}") from None

    def expect(self, kind: str, deadline: float) -> Any:
        """The value of the next ``kind`` line; BenchError on ERROR, exit, or time running out."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"{self.name}: no {kind} in time{self.stderr_tail()}")
            try:
                got, value = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if got == kind:
                return value
            if got == "ERROR":
                raise BenchError(f"{self.name}: {value}")
            if got == "EOF":
                raise BenchError(f"{self.name}: worker exited before {kind}{self.stderr_tail()}")

    def stderr_tail(self, lines: int = 15) -> str:
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace").strip().splitlines()[-lines:]
        return ("\n  " + "\n  ".join(text)) if text else ""

    def stop(self) -> None:
        """Close stdin (the worker exits), then make sure: kill its whole process group."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
        self._stderr.close()


def _cpu_arg(cpu: int | None) -> int:
    """``bench.worker --cpu``'s value: -1 leaves the process unpinned."""
    return -1 if cpu is None else cpu


class WorkerPair:
    """A server and a client worker process, restarted after any failure."""

    def __init__(
        self, certs: Path, log_dir: Path | None = None, cpus: tuple[int | None, int | None] = (SERVER_CPU, CLIENT_CPU)
    ) -> None:
        self.certs = certs
        self.log_dir = log_dir  # keep each process's stderr there (default: discarded)
        self.cpus = cpus  # (server's core, client's core); None: that side is not pinned
        self._sides: tuple[_Side, _Side] | None = None

    def _start(self) -> tuple[_Side, _Side]:
        if self._sides is None:
            self._sides = (
                _Side("server", self.certs, _cpu_arg(self.cpus[0]), self.log_dir),
                _Side("client", self.certs, _cpu_arg(self.cpus[1]), self.log_dir),
            )
        return self._sides

    @property
    def pids(self) -> tuple[int, int] | None:
        """(server pid, client pid) while the processes run (for RSS sampling)."""
        return None if self._sides is None else (self._sides[0].proc.pid, self._sides[1].proc.pid)

    def run(
        self, role: str, params: dict[str, Any], timeout: float, profile_dir: Path | None = None
    ) -> dict[str, Any]:
        """Run ``role`` once; ``{"server": result, "client": result}``."""
        server, client = self._start()
        deadline = time.monotonic() + timeout
        profile = {
            side: (str(profile_dir / f"{role}.{side}.prof") if profile_dir else None)
            for side in ("server", "client")
        }
        try:
            server.send({"role": role, "params": params, "profile": profile["server"]})
            port = server.expect("READY", deadline)
            client.send({"role": role, "params": params, "port": port, "profile": profile["client"]})
            client_result = client.expect("RESULT", deadline)
            server_result = server.expect("RESULT", deadline)
        except BaseException:
            self.close()  # a half-finished run leaves no process behind
            raise
        return {"server": server_result, "client": client_result}

    def close(self) -> None:
        if self._sides is not None:
            for side in self._sides:
                side.stop()
            self._sides = None

    def __enter__(self) -> WorkerPair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
