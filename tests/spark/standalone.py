"""A real standalone Spark cluster on loopback whose executors cannot see the bridges' disks.

A master and two workers run as the JVMs pyspark ships (``bin/spark-class``
with ``org.apache.spark.deploy.master.Master`` / ``worker.Worker``), bound
to 127.0.0.1. Each worker starts in a private mount namespace (``unshare
-m``) in which an empty tmpfs covers :attr:`StandaloneCluster.hidden`, the
directory every test bridge keeps its log under. Executors are the
workers' children, so they inherit that namespace: they cannot open the
bridges' segment files or registry, whatever their permissions (the
tests run as root, so ``chmod`` alone would not stop them). Reading the
log over Flight is their only way in, as for executors on other hosts.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyspark

from bench.processes import DIE_WITH_THE_PARENT
from tests.jvm_options import TEST_JVM_OPTIONS

STARTUP = 120.0  # seconds; only turns a hang into a failure


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Prefix of every cluster command: the program gets SIGTERM when the test process dies, however
#: it dies. A pytest killed from outside (SIGKILL, a CI timeout) never runs the fixture's
#: :meth:`StandaloneCluster.stop`, and JVMs started with ``spark-class`` would run on, holding
#: ports, cores and memory. The parent-death signal survives ``exec`` (``unshare``, ``sh`` and
#: ``spark-class`` all exec the next program), so it reaches the JVM itself, and a worker's
#: executors end with their worker. ``setpriv`` (util-linux, beside ``unshare``) rather than a
#: ``preexec_fn``, which is unsafe in a process with threads (py4j's).
DIE_WITH_THE_TESTS = DIE_WITH_THE_PARENT


def cluster_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for every process of the cluster and of its drivers: loopback, this Python."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env |= {
        "SPARK_HOME": os.path.dirname(pyspark.__file__),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": TEST_JVM_OPTIONS,  # the master's and workers' (the executors': tests/conftest.py)
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")])),
    }
    return env | (extra or {})


#: What a Spark Connect server's environment changes (see ``connect_server_command``).
CONNECT_SERVER_ENV = {"SPARK_DAEMON_MEMORY": "768m"}


class StandaloneCluster:
    """``spark://127.0.0.1:PORT`` with two one-core workers; :meth:`stop` ends every JVM it started."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.hidden = tmp / "bridges"  # what executors see empty
        self.hidden.mkdir()
        self.port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
        self.processes: list[subprocess.Popen[bytes]] = []
        self.workers: list[subprocess.Popen[bytes]] = []

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"{name}.log", "wb") as out:
            proc = subprocess.Popen(
                [*DIE_WITH_THE_TESTS, *command], stdout=out, stderr=subprocess.STDOUT, env=cluster_env()
            )
        self.processes.append(proc)
        return proc

    def start(self) -> None:
        spark_class = self.spark_class
        self._spawn("master", [
            spark_class, "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(free_port()),
        ])  # fmt: skip
        self._wait_for(lambda: self._log("master").count("I have been elected leader"), "the master")
        for i in range(2):
            work = self.tmp / f"work-{i}"
            work.mkdir()
            hide = f'mount -t tmpfs -o size=1m tmpfs "{self.hidden}" && exec "$@"'
            self.workers.append(self._spawn(f"worker-{i}", [
                "unshare", "-m", "--propagation", "private", "sh", "-c", hide, "sh",
                spark_class, "org.apache.spark.deploy.worker.Worker", self.master_url,
                "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                "--webui-port", str(free_port()), "--work-dir", str(work),
            ]))  # fmt: skip
        self._wait_for(lambda: self._log("master").count("Registering worker") >= 2, "two workers")

    def _log(self, name: str) -> str:
        with contextlib.suppress(FileNotFoundError):
            return (self.tmp / f"{name}.log").read_text(errors="replace")
        return ""

    def _wait_for(self, ready: object, what: str) -> None:
        deadline = time.monotonic() + STARTUP
        while not ready():  # type: ignore[operator]
            for proc in self.processes:
                if proc.poll() is not None:
                    raise RuntimeError(f"{what}: a cluster process exited ({proc.args!r}); see {self.tmp}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not start within {STARTUP:g} s; see {self.tmp}")
            time.sleep(0.2)

    def sees_hidden(self) -> list[str]:
        """What a worker's mount namespace (its executors') lists in :attr:`hidden`: nothing.

        ``unshare`` execs ``sh``, which execs ``spark-class``, which execs the
        JVM: the pid we started is the worker's.
        """
        seen = []
        for proc in self.workers:
            pid = proc.pid
            seen += os.listdir(f"/proc/{pid}/root{self.hidden}")
        return seen

    def executor_namespaces_hide_the_logs(self) -> bool:
        """Every executor JVM running now is in a worker's private mount namespace."""
        worker_ns = {os.readlink(f"/proc/{p.pid}/ns/mnt") for p in self.workers}
        mine = os.readlink("/proc/self/ns/mnt")
        executors = _executor_pids()
        return bool(executors) and all(os.readlink(f"/proc/{pid}/ns/mnt") in worker_ns - {mine} for pid in executors)

    def connect_server_command(self, port: int, work: Path) -> list[str]:
        """A Spark Connect server (the one pyspark ships) whose driver runs on this cluster.

        Started as ``sbin/start-connect-server.sh`` would, through
        ``SparkSubmit``, but in the foreground so the test owns the JVM's
        pid. Run it with :data:`CONNECT_SERVER_ENV` over :func:`cluster_env`:
        Spark's launcher sizes a Connect server's heap like a daemon's, by
        ``SPARK_DAEMON_MEMORY`` (``--driver-memory`` is ignored), and a
        driver below 450 MiB refuses to start (``INVALID_DRIVER_MEMORY``).
        """
        return [
            self.spark_class, "org.apache.spark.deploy.SparkSubmit",
            "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--name", "aqueduct-connect-test", "--master", self.master_url,
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", f"spark.connect.grpc.binding.port={port}",
            "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.ui.enabled=false", "--conf", f"spark.local.dir={work}",
            "--conf", f"spark.executor.extraJavaOptions={TEST_JVM_OPTIONS}",
            "spark-internal",
        ]  # fmt: skip

    def stop(self) -> None:
        for proc in reversed(self.processes):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.processes):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)


def _executor_pids() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                if b"CoarseGrainedExecutorBackend" in cmdline:
                    pids.append(int(entry))
    return pids
