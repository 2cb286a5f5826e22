"""The built wheel, installed into a fresh virtualenv with its declared dependencies, gives working CLIs.

The wheel is built, and installed with the ``spark`` extra, by README.md's
"build a wheel" commands as written, run in a copy of what it is made of
(``pyproject.toml``, ``README.md``, ``LICENSE``, ``aqueduct/``), so the
checkout gets no ``build/``, ``dist/`` or ``*.egg-info``. It goes into a new
virtualenv that sees nothing of the suite's own site-packages: pip
resolves every declared dependency from the registry, so a bound that
admits a release the code cannot run on fails here. pip's cache (which
``make test`` filled building ``.venv``) makes that about half a minute
on two cores, pyspark's jars being most of it; ``--prefer-binary`` keeps
pip from building an sdist where a wheel of an admitted release exists.
Commands run outside the checkout and without ``PYTHONPATH``, so neither
the source tree nor ``interop/`` can stand in for what the wheel lacks:
``aqueduct-bridge serve`` (its own Spark driver) and ``aqueduct-produce``
from the virtualenv deliver records exactly once, ids and payloads read
back from the sink, and no secret is on either command line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import psutil
import pytest

import aqueduct
from aqueduct.runtime.certs import CertPaths
from demo.verify import verify_output
from tests.ports import free_port

pytestmark = [
    pytest.mark.slow,  # a virtualenv resolved from the registry and a Spark bridge: not for test-fast
    pytest.mark.xdist_group("packaging"),  # one worker builds the wheel and the virtualenv once for all
]

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 300
DISTRIBUTION = "aqueduct-quic"


def readme_block(after: str) -> str:
    """The first shell block of README.md after the line holding ``after``: the commands a user copies."""
    text = (ROOT / "README.md").read_text()
    rest = text[text.index(after):]
    start = rest.index("```sh\n") + len("```sh\n")
    return rest[start:rest.index("```", start)]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """README.md's "build a wheel" commands, run as written in a copy of the checkout: (the wheel, the virtualenv).

    ``pip`` is this interpreter's pip acting on a fresh virtualenv (which needs no pip of its own);
    ``PIP_PREFER_BINARY`` keeps pip from building an sdist where a wheel of an admitted release exists.
    """
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src)
    # guides/certs.md is a link to certs/README.md: the copy holds its text
    shutil.copytree(ROOT / "aqueduct", src / "aqueduct", ignore=shutil.ignore_patterns("__pycache__"))
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=TIMEOUT)
    python = root / "bin" / "python"
    script = (f'pip() {{ "{sys.executable}" -m pip --python "{python}" --disable-pip-version-check --quiet "$@"; }}\n'
              "set -e\n" + readme_block("or build a wheel once"))  # fmt: skip
    start = time.monotonic()
    done = subprocess.run(["bash", "-c", script], cwd=src, capture_output=True, text=True, timeout=TIMEOUT,
                          env=os.environ | {"PIP_PREFER_BINARY": "1"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"the wheel built, and installed with its dependencies, in {time.monotonic() - start:.0f} s")
    check = pip(python, "check")  # every installed distribution's requirements hold together
    assert check.returncode == 0, check.stdout + check.stderr
    (wheel,) = (src / "dist").glob("*.whl")
    return wheel, root


@pytest.fixture(scope="module")
def wheel(built: tuple[Path, Path]) -> Path:
    return built[0]


@pytest.fixture(scope="module")
def venv(built: tuple[Path, Path]) -> Path:
    return built[1]


def pip(python: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """This interpreter's pip acting on ``python``'s environment (the virtualenv needs no pip of its own)."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check", *argv],
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip


def installed(venv: Path) -> dict[str, str]:
    done = pip(venv / "bin" / "python", "list", "--format", "json")
    assert done.returncode == 0, done.stderr
    return {d["name"].lower().replace("_", "-"): d["version"] for d in json.loads(done.stdout)}  # PEP 503 names


def clean_env(venv: Path) -> dict[str, str]:
    """The environment a user's shell gives the virtualenv's commands: no suite paths, no cookie."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "AQUEDUCT_COOKIE"}}
    return env | {"PYSPARK_PYTHON": str(venv / "bin" / "python")}


def run_in(venv: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd,
        env=clean_env(venv),
    )  # fmt: skip


def test_the_wheel_holds_only_the_aqueduct_package_typed(wheel: Path) -> None:
    assert wheel.name == f"aqueduct_quic-{aqueduct.__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    info = f"aqueduct_quic-{aqueduct.__version__}.dist-info"
    assert {n.split("/")[0] for n in names} == {"aqueduct", info}
    assert "aqueduct/py.typed" in names
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert f"Name: {DISTRIBUTION}\n" in metadata and f"Version: {aqueduct.__version__}\n" in metadata
    assert "Requires-Dist: pyspark<4.4,>=4.3; extra == \"spark\"" in metadata


def test_the_wheel_carries_the_license_and_the_readme(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    info = f"aqueduct_quic-{aqueduct.__version__}.dist-info"
    assert archive.read(f"{info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
    headers, _, description = archive.read(f"{info}/METADATA").decode().partition("\n\n")
    assert "License-Expression: Apache-2.0\n" in headers and "License-File: LICENSE\n" in headers
    assert "Description-Content-Type: text/markdown\n" in headers
    assert description.strip() == (ROOT / "README.md").read_text().strip()
    assert "Project-URL" not in headers  # none until the project has a public address (pyproject.toml)


def test_the_installed_clis_work_from_the_virtualenv(venv: Path, tmp_path: Path) -> None:
    for name in ("aqueduct", "aqueduct-bridge", "aqueduct-produce"):
        done = run_in(venv, name, "--version", cwd=tmp_path)
        assert (done.returncode, done.stdout.strip()) == (0, f"{name} {aqueduct.__version__}"), done.stderr

    where = run_in(venv, "python", "-c", "import aqueduct, importlib.util as u; "
                   "print(aqueduct.__file__); print(u.find_spec('interop'))", cwd=tmp_path)  # fmt: skip
    assert where.returncode == 0, where.stderr
    module, interop = where.stdout.split()
    assert Path(module).is_relative_to(venv) and interop == "None"  # tooling stays in the repo

    done = run_in(venv, "aqueduct", "certs", str(tmp_path / "certs"), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert Path(json.loads(done.stdout)["ca"]).is_file() and Path(json.loads(done.stdout)["client_ca"]).is_file()

    # The production notes `aqueduct certs --help` names are in the virtualenv, with their text.
    done = subprocess.run([str(venv / "bin" / "aqueduct"), "certs", "--help"], capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=tmp_path, env=clean_env(venv) | {"COLUMNS": "1000"})  # fmt: skip
    guide = Path(done.stdout.split("For production see ")[1].split()[0])
    assert guide.is_relative_to(venv) and guide.read_text() == (ROOT / "certs" / "README.md").read_text()

    # The bridge's log commands (they import the Spark side) on a log the installed package writes.
    make_log = ("from pathlib import Path; from aqueduct.bridge.storage.log import DurableLog; "
                "from aqueduct.connector.frames import ConnectorMessage\n"
                "with DurableLog(Path('log')) as log:\n"
                "    log.open_stream(1, 'orders', 'shop/a'); log.append(ConnectorMessage.build(1, b'x', message_id=0)); "
                "log.commit()")  # fmt: skip
    assert run_in(venv, "python", "-c", make_log, cwd=tmp_path).returncode == 0
    done = run_in(venv, "aqueduct-bridge", "status", "--log", "log", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["streams"][0]["stream_name"] == "orders"

    done = run_in(venv, "aqueduct-produce", "http://127.0.0.1:7000", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("aqueduct-produce: bridge URL 'http://127.0.0.1:7000': unknown scheme")


def test_the_declared_dependencies_were_resolved_into_the_virtualenv(venv: Path) -> None:
    have = installed(venv)
    declared = {DISTRIBUTION, "aioquic", "cryptography", "cbor2", "pyarrow", "psutil", "crc32c",
                "pyspark", "pandas", "prometheus-client"}  # fmt: skip
    assert declared <= have.keys(), declared - have.keys()
    assert have[DISTRIBUTION] == aqueduct.__version__


def command_lines(pid: int) -> dict[int, bytes]:
    """What ``ps`` shows of ``pid`` and every process under it now (the bridge's JVM among them)."""
    lines = {}
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            lines[proc.pid] = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        except OSError:
            continue  # ended since it was listed (a short-lived helper)
    return lines


def exec_command_line(pid: int) -> bytes:
    """A child's command line once its exec finished (a process in the middle of execve reads as empty)."""
    deadline = time.monotonic() + TIMEOUT
    while not (line := Path(f"/proc/{pid}/cmdline").read_bytes()):
        assert time.monotonic() < deadline, f"process {pid} shows no command line"
        time.sleep(0.01)
    return line


def wait_for_line(path: Path, text: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + TIMEOUT
    while text not in path.read_text():
        assert proc.poll() is None, path.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {text!r} in {path}: {path.read_text()[-3000:]}"
        time.sleep(0.2)


def test_serve_and_produce_from_the_virtualenv_deliver_exactly_once_with_no_secret_in_argv(
    venv: Path, tmp_path: Path, certs: CertPaths
) -> None:
    cookie = "packaged-cookie-5d1e"
    cookie_file = tmp_path / "cookie"
    cookie_file.write_text(cookie + "\n")
    cookie_file.chmod(0o600)
    key_body = certs.server_key.read_text().splitlines()[1]  # a line of the private key itself
    port = free_port(socket.SOCK_DGRAM)
    records = [f"record {i} {os.urandom(6).hex()}".encode() for i in range(40)]
    (tmp_path / "records.txt").write_bytes(b"".join(r + b"\n" for r in records))

    log = tmp_path / "bridge.log"
    with open(log, "wb") as sink:
        bridge = subprocess.Popen(
            [str(venv / "bin" / "aqueduct-bridge"), "serve", "--quic", f"127.0.0.1:{port}", "--log", "log",
             "--output", "out", "--master", "local[1]", "--trigger-interval", "0.5", "--cert",
             str(certs.server_cert), "--key", str(certs.server_key), "--cookie-file", str(cookie_file)],
            stdout=sink, stderr=sink, cwd=tmp_path, env=clean_env(venv),
        )  # fmt: skip
    try:
        wait_for_line(log, "listening on QUIC", bridge)
        producer = subprocess.Popen(
            [str(venv / "bin" / "aqueduct-produce"), f"aqueduct://127.0.0.1:{port}", "records.txt", "--cafile",
             str(certs.ca), "--program", "packaged", "--ack-timeout", str(TIMEOUT), "--json", "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=clean_env(venv) | {"AQUEDUCT_COOKIE": cookie},
        )  # fmt: skip
        argv = {"producer": exec_command_line(producer.pid)}
        out, err = producer.communicate(timeout=TIMEOUT)
        assert producer.returncode == 0, err
        argv |= {f"bridge process {pid}": line for pid, line in command_lines(bridge.pid).items()}
        summary = json.loads(out)
        assert summary["sent"] == summary["acked"] == len(records) and summary["errors"] == [], summary
    finally:
        if bridge.poll() is None:
            bridge.send_signal(signal.SIGTERM)
        bridge.wait(TIMEOUT)
    assert bridge.returncode == 0, log.read_text()[-3000:]

    assert len(argv) >= 3  # the producer, the bridge and its Spark driver's JVM
    assert b"aqueduct-bridge" in argv[f"bridge process {bridge.pid}"] and b"aqueduct-produce" in argv["producer"]
    leaked = {who: secret for who, line in argv.items() for secret in (cookie, key_body) if secret.encode() in line}
    assert leaked == {}

    # Acked means committed in the sink: every record is there once, with its bytes.
    (stream,) = (int(sid) for sid in summary["streams"])
    result = verify_output(tmp_path / "out", {stream: dict(enumerate(records))})
    assert result.ok, result.problems()
