"""The built wheel, installed into a clean virtualenv, gives working CLIs.

The wheel is built from a copy of what it is made of (``pyproject.toml``,
``README.md``, ``aqueduct/``), so the checkout gets no ``build/`` or
``*.egg-info``. It is installed without its dependencies into a new
virtualenv that sees this interpreter's site-packages through a ``.pth``
file (no download, a few seconds): the package itself comes only from the
wheel, the third-party libraries from what the suite already runs on.
Commands run outside the checkout and without ``PYTHONPATH``, so neither
the source tree nor ``interop/`` can stand in for what the wheel lacks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import aqueduct

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 300
DISTRIBUTION = "aqueduct-quic"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(ROOT / "aqueduct", src / "aqueduct", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(src)],
        check=True, timeout=TIMEOUT, capture_output=True,
    )  # fmt: skip
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=TIMEOUT)
    python = root / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", str(wheel)],
        check=True, timeout=TIMEOUT, capture_output=True,
    )  # fmt: skip
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=TIMEOUT,
    ).stdout.strip()  # fmt: skip
    # The dependencies: this interpreter's site-packages, after the venv's own (the wheel's aqueduct wins).
    (Path(site) / "suite-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return root


def run_in(venv: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["PYSPARK_PYTHON"] = str(venv / "bin" / "python")
    return subprocess.run(
        [str(venv / "bin" / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd, env=env
    )


def test_the_wheel_holds_only_the_aqueduct_package_typed(wheel: Path) -> None:
    assert wheel.name == f"aqueduct_quic-{aqueduct.__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"aqueduct", f"aqueduct_quic-{aqueduct.__version__}.dist-info"}
    assert "aqueduct/py.typed" in names
    metadata = zipfile.ZipFile(wheel).read(f"aqueduct_quic-{aqueduct.__version__}.dist-info/METADATA").decode()
    assert f"Name: {DISTRIBUTION}\n" in metadata and f"Version: {aqueduct.__version__}\n" in metadata
    assert "Requires-Dist: pyspark<4.4,>=4.2; extra == \"spark\"" in metadata


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
    assert Path(json.loads(done.stdout)["ca"]).is_file()

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
    assert done.returncode == 2 and done.stderr.startswith("aqueduct-produce: unsupported connector URL scheme")
