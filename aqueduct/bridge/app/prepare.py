"""``aqueduct-bridge prepare``: write Spark's class archive now, not at the first ``serve``'s stop.

A ``serve`` that finds no class archive (:mod:`.class_archive`) starts
Spark without one, 7-9 s slower, and writes one when it stops, which
holds that stop about 15 s: the first ``serve`` on a machine, the one a
new user tries, or every ``serve`` of a container whose image did not
keep its cache. ``prepare`` pays that once, when the operator chooses: in
an image's build, a provisioning step, or a unit's ``ExecStartPre``.

It runs a real ``serve`` (plain TCP on loopback, a log and an output in a
temporary directory), has one record acked through it, so that the JVM
loads what a bridge's first micro-batch needs (the source, the streaming
engine, the Parquet sink), then stops it with SIGTERM, as an operator
would, and the JVM writes the archive on its way out. Nothing of that run
is kept but the archive. A machine already prepared (for this Java and
this Spark) is left alone at once, without starting Spark.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aqueduct.bridge.app.class_archive import KEEP_WAIT, ClassArchive, cache_dir, class_archive

#: seconds the stopped ``serve`` may take to stop Spark and write the archive
STOP_WAIT = KEEP_WAIT + 60.0
#: lines of the ``serve`` run's own log shown when it failed
TAIL = 20


class PrepareError(Exception):
    """The preparing ``serve`` failed: its words (the tail of its log) say why."""


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` did: the archive's path and size, and whether this run wrote it."""

    archive: Path | None
    written: bool
    why: str  # one line for the operator
    seconds: float = 0.0

    def doc(self) -> dict[str, object]:
        size = self.archive.stat().st_size if self.archive is not None and self.archive.is_file() else None
        return {
            "archive": None if self.archive is None else str(self.archive),
            "bytes": size, "written": self.written, "why": self.why, "seconds": round(self.seconds, 3),
        }  # fmt: skip


def _archive_for_serve() -> tuple[ClassArchive | None, str]:
    """The archive ``serve`` would map or write here, or None and why there is none to prepare."""
    if "PYSPARK_SUBMIT_ARGS" in os.environ:
        return None, "PYSPARK_SUBMIT_ARGS is set: serve launches Spark as it says, without a class archive"
    if os.environ.get("AQUEDUCT_CLASS_ARCHIVE", "1") == "0":
        return None, "AQUEDUCT_CLASS_ARCHIVE=0 turns the class archive off"
    from aqueduct.bridge.app.jvm import launch_spark_home

    archive = class_archive(launch_spark_home())
    if archive is None:
        return None, (
            f"no class archive can be kept here (no java found, no Spark jars, the cache {cache_dir()} not writable, "
            "or another bridge's JVM is writing it now)"
        )
    return archive, ""


def prepare(timeout: float, say: Callable[[str], None]) -> Prepared:
    """Make sure ``serve`` finds a class archive here; ``say`` tells the operator how it goes."""
    archive, why = _archive_for_serve()
    if archive is None:
        return Prepared(None, False, why)
    if not archive.writes:
        return Prepared(archive.path, False, "already prepared: serve maps this archive at every start")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="aqueduct-prepare-") as tmp:
        _serve_once(Path(tmp), timeout, say)
        if not archive.path.is_file():
            raise PrepareError(f"serve stopped without a class archive {archive.path}:\n{_tail(Path(tmp) / 'serve.log')}")
    return Prepared(archive.path, True, "written: serve maps it from its next start on", time.monotonic() - began)


def _serve_once(tmp: Path, timeout: float, say: Callable[[str], None]) -> None:
    """Run ``serve`` in ``tmp``, have one record acked through it, stop it with SIGTERM and wait for it."""
    port = _free_tcp_port()
    cookie = secrets.token_hex(16)
    command = [
        sys.executable, "-m", "aqueduct.bridge.app.cli", "serve", "--tcp", f"127.0.0.1:{port}",
        "--log", str(tmp / "log"), "--output", str(tmp / "output"), "--master", "local[1]",
    ]  # fmt: skip
    env = {**os.environ, "AQUEDUCT_COOKIE": cookie}
    say("starting Spark once to write its class archive (half a minute on a small machine; nothing of this run is kept)")
    with (tmp / "serve.log").open("wb") as log:
        bridge = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        began = time.monotonic()
        try:
            asyncio.run(_one_record_acked(port, cookie, timeout, bridge))
        except Exception as exc:
            _end(bridge)
            raise PrepareError(f"no record went through serve ({exc or type(exc).__name__}):\n{_tail(tmp / 'serve.log')}") from None
        except BaseException:  # Ctrl-C: the bridge started here ends here
            _end(bridge)
            raise
        say(f"a record went through Spark in {time.monotonic() - began:.1f} s; stopping (the JVM writes the archive)")
        bridge.send_signal(signal.SIGTERM)
        try:
            code = bridge.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            _end(bridge)
            raise PrepareError(f"serve did not stop within {STOP_WAIT:g} s:\n{_tail(tmp / 'serve.log')}") from None
    if code != 0:
        raise PrepareError(f"serve exited with status {code}:\n{_tail(tmp / 'serve.log')}")


async def _one_record_acked(port: int, cookie: str, timeout: float, bridge: subprocess.Popen[bytes]) -> None:
    """Connect (retrying while Spark starts), send one record, wait for its ACK; fail at once if ``serve`` ends."""
    from aqueduct.connector.producer.client import Connector

    async def through() -> None:
        connector = Connector(
            f"tcp://127.0.0.1:{port}", cookie=cookie, program="aqueduct-prepare", connect_timeout=timeout
        )
        try:
            await connector.connect()
            stream = await connector.stream(1, "prepare/1")
            await stream.send(b"prepare", message_id=stream.resume_from)
            await connector.wait_all_acked(timeout)
        finally:
            await connector.close(flush_timeout=1.0)

    async def ended() -> None:
        while bridge.poll() is None:
            await asyncio.sleep(0.2)
        raise PrepareError(f"serve exited with status {bridge.returncode}")

    done, pending = await asyncio.wait(
        [asyncio.ensure_future(through()), asyncio.ensure_future(ended())],
        timeout=timeout, return_when=asyncio.FIRST_COMPLETED,
    )  # fmt: skip
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    if not done:
        raise TimeoutError(f"no ACK within {timeout:g} s")
    for task in done:
        task.result()


def _end(bridge: subprocess.Popen[bytes]) -> None:
    """Kill the preparing ``serve`` (its Spark JVM runs in a session of its own and ends with its stdin)."""
    bridge.kill()
    bridge.wait()


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path) -> str:
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join(lines[-TAIL:])
