"""``aqueduct-produce`` as a real process against a TCP worker."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from aqueduct.auth import issue_token
from aqueduct.auth.keys import public_key_pem
from aqueduct.bridge.ingest.producer_auth import ProducerAuth
from aqueduct.connector.events import HelloAccepted, RecordsAccepted
from aqueduct.connector.worker.memory_sink import MemorySink
from aqueduct.connector.worker.tcp_listener import serve_tcp
from aqueduct.connector.worker_session import WorkerConfig

TIMEOUT = 60.0


#: these tests number their streams from 0 (the default derives ids from program, instance and name)
FROM_ZERO = ("--first-stream-id", "0")


async def produce(
    *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> tuple[int, dict | str, str]:
    """Run the CLI with streams numbered from 0; return (exit code, JSON summary or raw stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aqueduct.connector.producer.cli", *args, *FROM_ZERO,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=None if env is None else {**os.environ, **env},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), TIMEOUT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    summary = json.loads(out) if out.startswith(b"{") else out.decode()
    return proc.returncode, summary, err.decode()


async def test_help() -> None:
    code, out, _ = await produce("--help")
    assert code == 0 and "usage: aqueduct-produce" in out and "--payload-size" in out


async def test_lines_from_a_file_then_resume_skips_what_the_worker_holds(tmp_path: Path) -> None:
    sink = MemorySink()
    async with await serve_tcp("127.0.0.1", 0, sink) as server:
        url = f"tcp://127.0.0.1:{server.port}"
        lines = tmp_path / "in.txt"
        lines.write_text("".join(f"line {i}\n" for i in range(50)))
        common = ("--program", "cli", "--instance", "c1", "--json", "--quiet")
        code, summary, err = await produce(url, str(lines), *common)
        assert code == 0, err
        assert summary["sent"] == 50 and summary["acked"] == 50 and summary["errors"] == []
        lines.write_text("".join(f"line {i}\n" for i in range(60)))
        code, summary, err = await produce(url, str(lines), *common)
        assert code == 0, err
        assert summary["resume_from"] == {"0": 50} and summary["sent"] == 10
    assert sink.payloads("cli", "c1", 0) == [f"line {i}".encode() for i in range(60)]


async def test_files_may_follow_the_options_as_the_docs_show(tmp_path: Path) -> None:
    """``aqueduct-produce URL --cert c.pem --key c.key events.txt`` (deployment.md): the file after the options."""
    sink = MemorySink()
    async with await serve_tcp("127.0.0.1", 0, sink) as server:
        lines = tmp_path / "events.txt"
        lines.write_text("".join(f"event {i}\n" for i in range(5)))
        code, summary, err = await produce(
            f"tcp://127.0.0.1:{server.port}", "--program", "cli", "--instance", "late", "--json", str(lines)
        )
        assert code == 0, err
        assert summary["sent"] == summary["acked"] == 5
    assert sink.payloads("cli", "late", 0) == [f"event {i}".encode() for i in range(5)]


async def test_stdin_and_generator_across_streams() -> None:
    sink = MemorySink()
    async with await serve_tcp("127.0.0.1", 0, sink) as server:
        url = f"tcp://127.0.0.1:{server.port}"
        code, summary, err = await produce(url, "--program", "p", "--instance", "s", "--json", stdin=b"a\nb\n")
        assert code == 0, err
        assert sink.payloads("p", "s", 0) == [b"a", b"b"]
        code, summary, err = await produce(
            url, "--program", "p", "--instance", "g", "--count", "30", "--streams", "3",
            "--payload-size", "16", "--rate", "2000", "--json",
        )
        assert code == 0, err
        assert summary["sent"] == 90 and summary["acked"] == 90
        assert "sent" in err  # progress / final line on stderr
    for sid in range(3):
        payloads = sink.payloads("p", "g", sid)
        assert len(payloads) == 30 and all(len(p) == 16 for p in payloads)


async def test_refused_connection_is_reported() -> None:
    async with await serve_tcp("127.0.0.1", 0, MemorySink(), WorkerConfig(cookie=b"x")) as server:
        code, summary, _ = await produce(
            f"tcp://127.0.0.1:{server.port}", "--count", "1", "--cookie", "y", "--json"
        )
    assert code == 1 and summary["errors"] == ["refused: bad cookie"]


class CommitAfterRestartSink(MemorySink):
    """Durable at once (credits back), but committed only once the connector reconnected.

    After the last message it sends RESTART; the new session's OK then says
    everything is durable while no ACK said anything is committed, until
    the ACK that follows the new HELLO.
    """

    def __init__(self, total: int) -> None:
        super().__init__(auto_ack=False)
        self.total = total
        self.restarted = False

    async def handle(self, peer, event) -> None:
        await super().handle(peer, event)
        if isinstance(event, RecordsAccepted):
            peer.grant_credits(len(event.records))
            if not self.restarted and len(self.messages("cli", "r1", 0)) == self.total:
                self.restarted = True
                await peer.restart()
        elif isinstance(event, HelloAccepted) and self.restarted:
            peer.ack([(0, self.total)])


async def test_a_token_from_its_file_or_the_environment_is_what_a_token_checking_worker_admits(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    (tmp_path / "token.pub").write_bytes(public_key_pem(key.public_key()))
    token = issue_token(key, subject="aqueduct-produce", streams=("*",), now=int(time.time()), lifetime=600)
    (tmp_path / "my.token").write_text(token + "\n")
    config = WorkerConfig(credentials=ProducerAuth(tmp_path / "token.pub").check)
    async with await serve_tcp("127.0.0.1", 0, MemorySink(), config) as server:
        url = f"tcp://127.0.0.1:{server.port}"
        from_file = await produce(url, "--count", "1", "--token-file", str(tmp_path / "my.token"), "--json")
        from_env = await produce(url, "--count", "1", "--json", env={"AQUEDUCT_TOKEN": token})
        without = await produce(url, "--count", "1", "--json", env={"AQUEDUCT_TOKEN": ""})
    for code, summary, err in (from_file, from_env):
        assert code == 0 and summary["refused"] is None, err  # type: ignore[index]
    code, summary, _ = without
    assert code == 1 and summary["errors"] == [  # type: ignore[index]
        "refused: credential_required: this bridge admits producers by a token, not by the cookie"
    ]


async def test_summary_counts_commits_not_durable_points_after_a_reconnect() -> None:
    sink = CommitAfterRestartSink(100)
    async with await serve_tcp("127.0.0.1", 0, sink) as server:
        code, summary, err = await produce(
            f"tcp://127.0.0.1:{server.port}", "--count", "100",
            "--program", "cli", "--instance", "r1", "--json", "--quiet",
        )
        assert code == 0, err
        assert sink.restarted
        assert summary["resume_from"] == {"0": 0} and summary["connections"] == 2
        assert summary["sent"] == 100 and summary["acked"] == 100 and summary["errors"] == []
        code, summary, err = await produce(  # nothing new: nothing of this run to commit
            f"tcp://127.0.0.1:{server.port}", "--count", "100",
            "--program", "cli", "--instance", "r1", "--json", "--quiet",
        )
    assert code == 0, err
    assert summary["resume_from"] == {"0": 100} and summary["sent"] == 0 and summary["acked"] == 0


async def test_generated_records_go_in_batches_and_resume() -> None:
    """--count without --rate: send_many batches; a re-run with a larger count sends only the rest."""
    sink = MemorySink()
    async with await serve_tcp("127.0.0.1", 0, sink) as server:
        url = f"tcp://127.0.0.1:{server.port}"
        common = ("--program", "p", "--instance", "b", "--streams", "2", "--payload-size", "12", "--json", "--quiet")
        code, summary, err = await produce(url, "--count", "150", *common)
        assert code == 0, err
        assert summary["sent"] == 300 and summary["acked"] == 300
        code, summary, err = await produce(url, "--count", "200", *common)
        assert code == 0, err
        assert summary["resume_from"] == {"0": 150, "1": 150} and summary["sent"] == 100
    for sid in range(2):
        got = sink.messages("p", "b", sid)
        assert [m.message_id for m in got] == list(range(200))
        assert all(m.payload.startswith(b"%d:%d " % (sid, m.message_id)) for m in got)


async def test_many_lines_arrive_exact_whatever_their_ends(tmp_path: Path) -> None:
    """Lines read a chunk at a time: every one, in order, its bytes as written (CRLF, blank, no final newline)."""
    sink = MemorySink()
    text = b"".join(b"record %d \xc3\xa9\r\n" % i if i % 3 else b"record %d\n" % i for i in range(20_000))
    text += b"\n\nlast without newline"
    lines = tmp_path / "many.txt"
    lines.write_bytes(text)
    async with await serve_tcp("127.0.0.1", 0, sink) as server:
        code, summary, err = await produce(f"tcp://127.0.0.1:{server.port}", str(lines), "--program", "p",
                                           "--instance", "many", "--json", "--quiet")  # fmt: skip
    assert code == 0, err
    expected = [b"record %d \xc3\xa9" % i if i % 3 else b"record %d" % i for i in range(20_000)]
    expected += [b"", b"", b"last without newline"]
    assert summary["sent"] == summary["acked"] == len(expected)
    assert sink.payloads("p", "many", 0) == expected


async def test_lines_go_out_as_they_are_read() -> None:
    """A slow stdin: each line reaches the worker before the next one is written (no batch holds it back)."""
    sink = MemorySink()
    async with await serve_tcp("127.0.0.1", 0, sink) as server:
        url = f"tcp://127.0.0.1:{server.port}"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "aqueduct.connector.producer.cli", url, "--program", "p", "--instance", "live",
            "--quiet", *FROM_ZERO, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            for i in range(3):
                proc.stdin.write(b"line %d\n" % i)
                await proc.stdin.drain()
                await sink.wait_for(lambda i=i: len(sink.payloads("p", "live", 0)) == i + 1, TIMEOUT)
            proc.stdin.close()
            assert await asyncio.wait_for(proc.wait(), TIMEOUT) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert sink.payloads("p", "live", 0) == [b"line 0", b"line 1", b"line 2"]
