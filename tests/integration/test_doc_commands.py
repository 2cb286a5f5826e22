"""Every shell block of README.md and docs/deployment.md runs as written, or says why it cannot.

A user copies these blocks; a block that fails sends them away at the first
step. So each ```` ```sh ```` block either runs here, or the line before it
is ``<!-- not-run: REASON -->`` (a cluster, Docker, a release on PyPI, or a
test elsewhere that runs the same commands, named in the reason).

A block runs in bash (``set -e``) in an empty temporary directory, with the
suite's virtualenv first on ``PATH`` (so ``aqueduct-bridge`` is the one this
checkout installed) and no ``AQUEDUCT_COOKIE`` from the caller. The system
paths the deployment guide writes to (``/etc/aqueduct``, ``/secure``, ...)
are rooted in that directory. What the block leaves running in the
background (a bridge started with ``&``) is stopped by the test, by pid, with
SIGTERM, and must end within a minute. A block starting a bridge starts
Spark: it is marked ``slow`` and ``spark`` (not for ``make test-fast``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/deployment.md")
#: Fence languages of command blocks; other blocks (python, ini, dockerfile, file contents) are not run.
SHELL = {"sh", "bash", "shell", "console"}
#: Absolute paths the docs use for a real host, rooted in the block's temporary directory.
HOST_PATHS = ("/etc/aqueduct", "/secure", "/var/lib/aqueduct", "/opt/aqueduct")
#: A block that starts one of these starts Spark.
STARTS_SPARK = ("aqueduct-bridge serve", "make demo")
NOT_RUN = re.compile(r"<!-- not-run: (?P<reason>\S.*?) -->")
TIMEOUT = 60
SPARK_TIMEOUT = 300
STOP_TIMEOUT = 60


@dataclass(frozen=True)
class Block:
    """One fenced code block of a doc, with the not-run reason written just before it (or None)."""

    doc: str
    line: int
    lang: str
    text: str
    not_run: str | None

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def starts_spark(self) -> bool:
        return any(command in self.text for command in STARTS_SPARK)


def blocks(doc: str) -> list[Block]:
    """The fenced blocks of ``doc`` in order; a not-run marker counts only on the line right before a fence."""
    found = []
    lines = (ROOT / doc).read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = NOT_RUN.fullmatch(lines[i - 1].strip()) if i else None
        text = "\n".join(lines[i + 1 : end]) + "\n"
        found.append(Block(doc, i + 1, fence[1], text, marker["reason"] if marker else None))
        i = end + 1
    return found


def command_blocks() -> list[Block]:
    return [b for doc in DOCS for b in blocks(doc) if b.lang in SHELL]


def runnable() -> list[pytest.param]:
    heavy = [pytest.mark.slow, pytest.mark.spark]
    return [
        pytest.param(b, id=b.id, marks=heavy if b.starts_spark else [])
        for b in command_blocks()
        if b.not_run is None
    ]


def test_every_command_block_runs_or_says_why_not() -> None:
    commands = command_blocks()
    assert {b.doc for b in commands} == set(DOCS)  # the parser found the blocks
    markers = {doc: len(NOT_RUN.findall((ROOT / doc).read_text())) for doc in DOCS}
    placed = {doc: sum(1 for b in commands if b.doc == doc and b.not_run) for doc in DOCS}
    assert placed == markers, "a not-run marker that is not right before a ```sh block"
    # A block of commands without a language would escape this test: label it sh.
    unlabeled = [b.id for doc in DOCS for b in blocks(doc) if b.lang == "" and _looks_like_commands(b.text)]
    assert unlabeled == []


def _looks_like_commands(text: str) -> bool:
    first = text.split(maxsplit=1)[0] if text.strip() else ""
    return first in {"aqueduct", "aqueduct-bridge", "aqueduct-produce", "pip", "python", "python3", "make"}


def stop(pids: list[int]) -> list[int]:
    """SIGTERM each background process the block left and wait for it; those that did not end in time.

    They are bash's children, not ours, so their exit status is bash's to see: a stop is checked by
    the process ending, and whatever hangs is killed with what it started (a JVM).
    """
    hung = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            children = proc.children(recursive=True)
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            continue  # it ended on its own
        try:
            proc.wait(STOP_TIMEOUT)
        except psutil.TimeoutExpired:
            hung.append(pid)
        for child in [proc, *children]:
            if child.is_running():
                child.kill()
    return hung


@pytest.mark.parametrize("block", runnable())
def test_the_block_runs(block: Block, tmp_path: Path) -> None:
    text = block.text
    for path in HOST_PATHS:
        if path in text:
            (tmp_path / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
            text = text.replace(path, f"{tmp_path}{path}")
    background = tmp_path / ".background-pids"
    script = f"set -e\ntrap 'jobs -p > \"{background}\"' EXIT\n{text}"
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k not in {"AQUEDUCT_COOKIE", "PYTHONPATH"}}
    env |= {"PATH": f"{venv_bin}{os.pathsep}{env.get('PATH', '')}", "PYSPARK_PYTHON": sys.executable}
    out = tmp_path / ".output"
    with open(out, "wb") as sink:
        shell = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env, stdout=sink, stderr=sink)
        left: list[int] = []
        try:
            status = shell.wait(SPARK_TIMEOUT if block.starts_spark else TIMEOUT)
        except subprocess.TimeoutExpired:  # a hung block: its exit trap will not run, so list what it started
            status = None
            left = [child.pid for child in psutil.Process(shell.pid).children()]
            shell.kill()
            shell.wait()
    pids = [int(p) for p in background.read_text().split()] if background.exists() else left
    hung = stop(pids)
    said = out.read_text(errors="replace")[-4000:]
    assert status == 0, f"{block.id}: exit {status}\n{block.text}\n{said}"
    assert hung == [], f"{block.id}: {hung} did not stop within {STOP_TIMEOUT} s of SIGTERM\n{said}"
