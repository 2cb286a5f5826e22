"""The test's side of ``small_disk_bridge.py``: start it, ask it things, stop it (by its own pid)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

TIMEOUT = 60.0  # only turns a hang into a failure
STORED_LINE_LIMIT = 256 * 1024 * 1024  # the answer to ``stop`` is one line holding every stored payload


def namespace_refusal(directory: Path) -> str | None:
    """Why this machine cannot mount a private tmpfs at ``directory`` (None if it can)."""
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    probe = subprocess.run(
        ["unshare", "-m", "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(directory)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"cannot mount a tmpfs in a private mount namespace: {probe.stderr.strip() or probe.returncode}"
    return None


def small_disk_dir(tmp_path: Path) -> Path:
    """``tmp_path/small``, made, for a private tmpfs a test mounts and enters; the test skipped if it cannot."""
    small = tmp_path / "small"
    small.mkdir()
    reason = namespace_refusal(small) or (None if shutil.which("nsenter") else "no nsenter(1) on this machine")
    if reason:
        pytest.skip(reason)
    return small


def in_namespace(pid: int, *argv: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in process ``pid``'s mount namespace (where its tmpfs is); ``env`` added to this one's."""
    return subprocess.run(
        ["nsenter", "-t", str(pid), "-m", *argv], capture_output=True, text=True, timeout=TIMEOUT,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


class IngestChild:
    """``small_disk_bridge.py`` in a subprocess, spoken to over stdin/stdout; its log lines in a file."""

    def __init__(self, proc: asyncio.subprocess.Process, ports: list[int]) -> None:
        self.proc, self.ports = proc, ports

    @classmethod
    async def start(
        cls, args: Sequence[str], stderr: Path, prefix: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> IngestChild:
        """Start it (its log lines appended to ``stderr``); ``env`` is added to this process's environment."""
        argv = [*prefix, sys.executable, "-m", "tests.reliability.small_disk_bridge", *args]
        with stderr.open("ab") as err:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
                limit=STORED_LINE_LIMIT, env={**os.environ, **(env or {})},
            )  # fmt: skip
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)).decode()
        assert line.startswith("PORT "), line + stderr.read_text()[-2000:]
        return cls(proc, [int(p) for p in line.split()[1:]])

    async def ask(self, command: str) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command.encode() + b"\n")
        await self.proc.stdin.drain()
        return json.loads(await asyncio.wait_for(self.proc.stdout.readline(), TIMEOUT))

    async def until(self, what: str, check: Callable[[dict], object]) -> dict:
        """Poll ``report`` (bounded) until ``check(report)`` holds."""
        report: dict = {}
        for _ in range(int(TIMEOUT / 0.05)):
            report = await self.ask("report")
            if check(report):
                return report
            await asyncio.sleep(0.05)
        raise TimeoutError(f"timed out waiting for {what}: {report}")

    async def stop(self) -> list[tuple[int, int, bytes]]:
        """Stop it; every stored data record as (stream, message id, payload), in log order."""
        final = await self.ask("stop")
        assert await asyncio.wait_for(self.proc.wait(), TIMEOUT) == 0
        return [(s, m, bytes.fromhex(p)) for s, m, p in final["stored"]]

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
